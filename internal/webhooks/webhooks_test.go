package webhooks

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/internal/store/sqlite"
)

// TestSignStandardVector checks Sign against the example of the Standard
// Webhooks specification.
func TestSignStandardVector(t *testing.T) {
	got, err := Sign("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, []byte(`{"test": 2432232314}`))
	if err != nil {
		t.Fatal(err)
	}
	if want := "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="; got != want {
		t.Fatalf("Sign = %s; want %s", got, want)
	}
	if _, err := Sign("whsec_not base64!", "m", 1, nil); err == nil {
		t.Fatal("a secret that is not base64 signed")
	}
	s := NewSecret()
	if !strings.HasPrefix(s, SecretPrefix) {
		t.Fatalf("secret %q", s)
	}
	if k, err := secretKey(s); err != nil || len(k) != 32 {
		t.Fatalf("secret key: %d bytes, %v", len(k), err)
	}
}

// verify checks a request's signature with plain crypto/hmac, apart from
// Sign.
func verify(t *testing.T, secret string, r *http.Request, body []byte) bool {
	t.Helper()
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		t.Fatal(err)
	}
	mac := hmac.New(sha256.New, key)
	io.WriteString(mac, r.Header.Get("webhook-id")+"."+r.Header.Get("webhook-timestamp")+".")
	mac.Write(body)
	want := "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
	return hmac.Equal([]byte(r.Header.Get("webhook-signature")), []byte(want))
}

type harness struct {
	st     *sqlite.DB
	team   string
	cancel context.CancelFunc
	done   chan struct{}
	obs    *countObserver
}

type countObserver struct {
	mu sync.Mutex
	n  map[string]int
}

func (o *countObserver) WebhookAttempt(outcome string, _ time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.n[outcome]++
}

func (o *countObserver) get(outcome string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.n[outcome]
}

// start opens a store with one team and runs a dispatcher over it with
// small backoffs; wake is never closed, so the poll drives it.
func start(t testing.TB, cfg Config) *harness {
	t.Helper()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "cove.db"))
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{st: st, team: "team_a", done: make(chan struct{}), obs: &countObserver{n: map[string]int{}}}
	if err := st.CreateTeam(t.Context(), api.Team{ID: h.team, Name: "a", CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	d, err := New(cfg, st, nil, h.obs, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	go func() {
		defer close(h.done)
		d.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-h.done
		st.Close()
	})
	return h
}

func testConfig() Config {
	cfg := DefaultConfig()
	cfg.Backoff, cfg.MaxBackoff, cfg.Poll, cfg.Timeout = time.Millisecond, 4*time.Millisecond, 5*time.Millisecond, 5*time.Second
	cfg.AllowPrivate = true
	cfg.OpenSecret = testOpen
	return cfg
}

// testSeal stands for the server's sealing: the stored value names the
// team and the webhook, and testOpen opens it only as theirs.
func testSeal(team, id, secret string) string { return "sealed:" + team + "/" + id + ":" + secret }

func testOpen(team, id, stored string) (string, error) {
	v, ok := strings.CutPrefix(stored, "sealed:"+team+"/"+id+":")
	if !ok {
		return "", fmt.Errorf("webhook %s: stored secret does not open", id)
	}
	return v, nil
}

// create stores w with its secret sealed (testSeal).
func (h *harness) create(t testing.TB, w store.Webhook) {
	t.Helper()
	w.Secret = testSeal(w.TeamID, w.ID, w.Secret)
	if err := h.st.CreateWebhook(t.Context(), w); err != nil {
		t.Fatal(err)
	}
}

func (h *harness) hook(t *testing.T, url string, events ...string) store.Webhook {
	t.Helper()
	w := store.Webhook{Webhook: api.Webhook{ID: "whk_" + strings.ReplaceAll(t.Name(), "/", "_"), TeamID: h.team, URL: url, Events: events, CreatedAt: time.Now()},
		Secret: NewSecret()}
	h.create(t, w)
	return w
}

func (h *harness) event(t *testing.T, typ string) api.Event {
	t.Helper()
	e, err := h.st.AppendEvent(t.Context(), h.team, api.Event{Type: typ, SandboxID: "sbx_1", Time: time.Now().UTC()})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// settled waits until none of the webhook's n deliveries is pending.
func (h *harness) settled(t *testing.T, webhookID string, n int) []api.Delivery {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		l, err := h.st.ListDeliveries(t.Context(), store.DeliveryFilter{WebhookID: webhookID})
		if err != nil {
			t.Fatal(err)
		}
		pending := 0
		for _, d := range l {
			if d.State == api.DeliveryPending {
				pending++
			}
		}
		if len(l) == n && pending == 0 {
			return l
		}
		if time.Now().After(deadline) {
			t.Fatalf("deliveries did not settle: %+v", l)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestDeliverSignedInOrder(t *testing.T) {
	h := start(t, testConfig())
	var (
		mu    sync.Mutex
		got   []string
		bad   []string
		hdrID = map[string]bool{}
	)
	var secret string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var p Payload
		json.Unmarshal(body, &p)
		mu.Lock()
		defer mu.Unlock()
		if !verify(t, secret, r, body) || r.Header.Get("Content-Type") != "application/json" || hdrID[r.Header.Get("webhook-id")] {
			bad = append(bad, string(body))
		}
		hdrID[r.Header.Get("webhook-id")] = true
		got = append(got, p.Type+"/"+p.Data.ID)
	}))
	defer srv.Close()
	wh := h.hook(t, srv.URL, "sandbox.*")
	secret = wh.Secret
	var want []string
	for _, typ := range []string{"sandbox.creating", "command.started", "sandbox.running", "sandbox.terminated"} {
		e := h.event(t, typ)
		if strings.HasPrefix(typ, "sandbox.") {
			want = append(want, typ+"/"+e.ID)
		}
	}
	l := h.settled(t, wh.ID, 3)
	for _, d := range l {
		if d.State != api.DeliveryDelivered || d.AttemptCount != 1 || d.Attempts[0].StatusCode != 200 {
			t.Errorf("delivery %+v", d)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(got, " ") != strings.Join(want, " ") || len(bad) > 0 {
		t.Fatalf("received %v (bad: %v); want %v", got, bad, want)
	}
}

// TestSecretOpened: the dispatcher signs with the secret OpenSecret
// opens from what the store holds, never with the stored value itself; a
// stored secret that does not open fails the attempt before anything is
// sent; and a dispatcher without OpenSecret is refused.
func TestSecretOpened(t *testing.T) {
	if _, err := New(DefaultConfig(), nil, nil, nil, slog.New(slog.DiscardHandler)); err == nil {
		t.Error("a dispatcher without OpenSecret was made")
	}
	cfg := testConfig()
	cfg.RetryFor = 0 // a failed attempt is not retried
	h := start(t, cfg)
	var mu sync.Mutex
	var verified, posts int
	var secret string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		posts++
		if verify(t, secret, r, body) {
			verified++
		}
	}))
	defer srv.Close()
	wh := h.hook(t, srv.URL, "*")
	mu.Lock()
	secret = wh.Secret
	mu.Unlock()
	h.event(t, "sandbox.running")
	if d := h.settled(t, wh.ID, 1); d[0].State != api.DeliveryDelivered {
		t.Fatalf("delivery %+v", d[0])
	}

	// Stored for another webhook: it does not open as this one's.
	moved := store.Webhook{Webhook: api.Webhook{ID: "whk_moved", TeamID: h.team, URL: srv.URL, Events: []string{"*"}, CreatedAt: time.Now()},
		Secret: testSeal(h.team, wh.ID, wh.Secret)}
	if err := h.st.CreateWebhook(t.Context(), moved); err != nil {
		t.Fatal(err)
	}
	h.event(t, "sandbox.running")
	d := h.settled(t, moved.ID, 1)
	if len(d[0].Attempts) == 0 || !strings.Contains(d[0].Attempts[0].Error, "secret could not be opened") {
		t.Errorf("attempt with a secret that does not open: %+v", d[0])
	}
	h.settled(t, wh.ID, 2)
	mu.Lock()
	defer mu.Unlock()
	if posts != 2 || verified != 2 {
		t.Errorf("the receiver got %d posts, %d verified; want only the first webhook's two", posts, verified)
	}
}

func TestRetriedUntilDelivered(t *testing.T) {
	h := start(t, testConfig())
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) <= 2 {
			http.Error(w, "not yet", http.StatusInternalServerError)
		}
	}))
	defer srv.Close()
	wh := h.hook(t, srv.URL, "*")
	h.event(t, "sandbox.running")
	d := h.settled(t, wh.ID, 1)[0]
	if d.State != api.DeliveryDelivered || d.AttemptCount != 3 || calls.Load() != 3 {
		t.Fatalf("delivery %+v after %d calls", d, calls.Load())
	}
	codes := []int{d.Attempts[0].StatusCode, d.Attempts[1].StatusCode, d.Attempts[2].StatusCode}
	if codes[0] != 500 || codes[1] != 500 || codes[2] != 200 || d.Attempts[0].Error == "" {
		t.Fatalf("attempts %+v", d.Attempts)
	}
	if h.obs.get("retry") != 2 || h.obs.get("delivered") != 1 {
		t.Fatalf("observed %v", h.obs.n)
	}
}

func TestGivesUpAfterRetryWindow(t *testing.T) {
	cfg := testConfig()
	cfg.RetryFor = 0
	h := start(t, cfg)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	wh := h.hook(t, srv.URL, "*")
	h.event(t, "sandbox.running")
	d := h.settled(t, wh.ID, 1)[0]
	if d.State != api.DeliveryFailed || d.AttemptCount != 1 || d.NextAttemptAt != nil {
		t.Fatalf("delivery %+v", d)
	}
}

// TestPrivateRefusedAtDial: without --webhook-allow-private, a delivery
// to a name that resolves to loopback is refused when it dials, and the
// receiver never sees it.
func TestPrivateRefusedAtDial(t *testing.T) {
	cfg := testConfig()
	cfg.AllowPrivate = false
	cfg.RetryFor = 0
	h := start(t, cfg)
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { calls.Add(1) }))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	wh := h.hook(t, "http://localhost:"+port+"/hook", "*")
	h.event(t, "sandbox.running")
	d := h.settled(t, wh.ID, 1)[0]
	if d.State != api.DeliveryFailed || !strings.Contains(d.Attempts[0].Error, "refused: 127.0.0.1 is a private") || calls.Load() != 0 {
		t.Fatalf("delivery %+v; receiver called %d times", d, calls.Load())
	}
}

// TestRedirectNotFollowed: a receiver's redirect (here to another
// loopback server) is a failed attempt; the target is never reached.
func TestRedirectNotFollowed(t *testing.T) {
	cfg := testConfig()
	cfg.RetryFor = 0
	h := start(t, cfg)
	var reached atomic.Int32
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { reached.Add(1) }))
	defer target.Close()
	redirect := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.URL, http.StatusTemporaryRedirect)
	}))
	defer redirect.Close()
	wh := h.hook(t, redirect.URL, "*")
	h.event(t, "sandbox.running")
	d := h.settled(t, wh.ID, 1)[0]
	if d.State != api.DeliveryFailed || d.Attempts[0].StatusCode != http.StatusTemporaryRedirect || reached.Load() != 0 {
		t.Fatalf("delivery %+v; target reached %d times", d, reached.Load())
	}
}

// TestRefusedNodeAddr: the node's own addresses, public ones included,
// are refused unless private addresses are allowed; metadata always.
func TestRefusedNodeAddr(t *testing.T) {
	node := netip.MustParseAddr("93.184.215.14")
	isNode := func(a netip.Addr) bool { return a == node }
	tests := []struct {
		addr         string
		allowPrivate bool
		refused      bool
	}{
		{"93.184.215.14", false, true},
		{"::ffff:93.184.215.14", false, true},
		{"93.184.215.14", true, false},
		{"93.184.215.15", false, false},
		{"127.0.0.1", false, true},
		{"127.0.0.1", true, false},
		{"169.254.169.254", true, true},
	}
	for _, tt := range tests {
		why := refused(netip.MustParseAddr(tt.addr), tt.allowPrivate, isNode)
		if (why != "") != tt.refused {
			t.Errorf("refused(%s, allowPrivate=%v) = %q; want refused=%v", tt.addr, tt.allowPrivate, why, tt.refused)
		}
	}
	ctl := dialControl(false, isNode)
	if err := ctl("tcp4", "93.184.215.14:443", nil); err == nil || !strings.Contains(err.Error(), "address of this node") {
		t.Errorf("dial to the node's address: %v", err)
	}
	if err := ctl("tcp4", "93.184.215.15:443", nil); err != nil {
		t.Errorf("dial to another public address: %v", err)
	}
}

func TestCheckURL(t *testing.T) {
	tests := []struct {
		url          string
		allowPrivate bool
		ok           bool
	}{
		{"https://hooks.example.com/cove", false, true},
		{"http://93.184.215.14:8080/x", false, true},
		{"", false, false},
		{"ftp://example.com/", false, false},
		{"https:///nohost", false, false},
		{"https://example.com/#frag", false, false},
		{"http://127.0.0.1:9/", false, false},
		{"http://127.0.0.1:9/", true, true},
		{"http://[::1]:9/", false, false},
		{"http://10.1.2.3/", false, false},
		{"http://192.168.1.1/", false, false},
		{"http://169.254.169.254/latest", true, false}, // metadata: never
		{"http://[::ffff:127.0.0.1]/", false, false},
		{"http://localhost:8080/", false, false},
		{"http://LOCALHOST./", false, false},
		{"http://app.localhost/", false, false},
		{"http://localhost:8080/", true, true},
		{"https://example.com/" + strings.Repeat("a", MaxURLLen), false, false},
	}
	for _, tt := range tests {
		err := CheckURL(t.Context(), tt.url, tt.allowPrivate)
		if (err == nil) != tt.ok {
			t.Errorf("CheckURL(%.60q, allowPrivate=%v) = %v; want ok=%v", tt.url, tt.allowPrivate, err, tt.ok)
		}
		if err != nil && api.ErrorCode(err) != api.CodeInvalidArgument {
			t.Errorf("CheckURL(%.60q): code %q", tt.url, api.ErrorCode(err))
		}
	}
}

func TestBackoff(t *testing.T) {
	d := &Dispatcher{cfg: Config{Backoff: time.Second, MaxBackoff: 10 * time.Second}}
	var got []time.Duration
	for n := 1; n <= 6; n++ {
		got = append(got, d.backoff(n))
	}
	want := []time.Duration{1, 2, 4, 8, 10, 10}
	for i := range want {
		if got[i] != want[i]*time.Second {
			t.Fatalf("backoffs %v; want %v s", got, want)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	def := DefaultConfig()
	if err := def.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	for name, change := range map[string]func(*Config){
		"no concurrency":        func(c *Config) { c.Concurrency = 0 },
		"no team concurrency":   func(c *Config) { c.TeamConcurrency = 0 },
		"team share over all":   func(c *Config) { c.TeamConcurrency = c.Concurrency + 1 },
		"no backlog":            func(c *Config) { c.Backlog = 0 },
		"no timeout":            func(c *Config) { c.Timeout = 0 },
		"no backoff":            func(c *Config) { c.Backoff = 0 },
		"max below backoff":     func(c *Config) { c.MaxBackoff = c.Backoff / 2 },
		"negative retry window": func(c *Config) { c.RetryFor = -time.Second },
		"no poll":               func(c *Config) { c.Poll = 0 },
	} {
		c := DefaultConfig()
		change(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestConcurrencyBound: with Concurrency 2, at most two attempts are in
// flight at once, one per webhook, however many webhooks have deliveries
// due; all are delivered once the receivers answer.
func TestConcurrencyBound(t *testing.T) {
	cfg := testConfig()
	cfg.Concurrency = 2
	h := start(t, cfg)
	var (
		mu            sync.Mutex
		inflight, top int
		perHook       = map[string]int{}
		topPerHook    int
	)
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hook := r.URL.Path
		mu.Lock()
		inflight++
		perHook[hook]++
		top = max(top, inflight)
		topPerHook = max(topPerHook, perHook[hook])
		mu.Unlock()
		<-release
		mu.Lock()
		inflight--
		perHook[hook]--
		mu.Unlock()
	}))
	defer srv.Close()
	var hooks []store.Webhook
	for i := range 4 {
		w := store.Webhook{Webhook: api.Webhook{ID: "whk_" + string(rune('a'+i)), TeamID: h.team, URL: srv.URL + "/" + string(rune('a'+i)),
			Events: []string{"*"}, CreatedAt: time.Now()}, Secret: NewSecret()}
		h.create(t, w)
		hooks = append(hooks, w)
	}
	for range 3 {
		h.event(t, "sandbox.running")
	}
	// Wait for the bound to be reached, give the dispatcher a chance to
	// overstep it, then let everything through.
	for {
		mu.Lock()
		n := inflight
		mu.Unlock()
		if n == 2 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	close(release)
	for _, w := range hooks {
		h.settled(t, w.ID, 3)
	}
	mu.Lock()
	defer mu.Unlock()
	if top != 2 || topPerHook != 1 {
		t.Fatalf("at most %d in flight (want 2), %d for one webhook (want 1)", top, topPerHook)
	}
}

// TestSilentReceiverTimesOut: a receiver that never answers costs one
// attempt of --webhook-timeout, recorded with no status and an error.
func TestSilentReceiverTimesOut(t *testing.T) {
	cfg := testConfig()
	cfg.Timeout = 50 * time.Millisecond
	cfg.RetryFor = 0
	h := start(t, cfg)
	stop := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-stop:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(stop)
	wh := h.hook(t, srv.URL, "*")
	h.event(t, "sandbox.running")
	d := h.settled(t, wh.ID, 1)[0]
	if d.State != api.DeliveryFailed || d.Attempts[0].StatusCode != 0 || !strings.Contains(d.Attempts[0].Error, "no answer within 50ms") {
		t.Fatalf("delivery %+v", d)
	}
	if h.obs.get("failed") != 1 {
		t.Fatalf("observed %v", h.obs.n)
	}
}

// TestPick: free slots go one per team in turn, starting after the team
// served last, never to a busy webhook or past a team's share.
func TestPick(t *testing.T) {
	dd := func(team, webhook string) store.DueDelivery {
		return store.DueDelivery{TeamID: team, Delivery: api.Delivery{WebhookID: webhook}}
	}
	// As the store orders them: by team, then delivery.
	due := []store.DueDelivery{
		dd("team_a", "whk_a1"), dd("team_a", "whk_a2"), dd("team_a", "whk_a3"),
		dd("team_b", "whk_b1"),
		dd("team_c", "whk_c1"), dd("team_c", "whk_c2"),
	}
	tests := []struct {
		name     string
		busy     map[string]string
		inFlight map[string]int
		last     string
		free     int
		perTeam  int
		want     []string
	}{
		{"round robin", nil, nil, "", 8, 2, []string{"whk_a1", "whk_b1", "whk_c1", "whk_a2", "whk_c2"}},
		{"after the last team", nil, nil, "team_a", 3, 2, []string{"whk_b1", "whk_c1", "whk_a1"}},
		{"after the last, wrapping", nil, nil, "team_c", 2, 2, []string{"whk_a1", "whk_b1"}},
		{"a team at its share", map[string]string{"whk_x": "team_a", "whk_y": "team_a"}, map[string]int{"team_a": 2}, "", 8, 2, []string{"whk_b1", "whk_c1", "whk_c2"}},
		{"a busy webhook", map[string]string{"whk_a1": "team_a"}, map[string]int{"team_a": 1}, "", 8, 3, []string{"whk_a2", "whk_b1", "whk_c1", "whk_a3", "whk_c2"}},
		{"no free slot", nil, nil, "", 0, 2, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, d := range pick(due, tt.busy, tt.inFlight, tt.last, tt.free, tt.perTeam) {
				got = append(got, d.Delivery.WebhookID)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("picked %v; want %v", got, tt.want)
			}
		})
	}
}
