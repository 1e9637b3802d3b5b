package webhooks

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
	cove "github.com/cove-dev/cove/sdk/go"

	_ "modernc.org/sqlite"
)

// TestRetriesSendSameBody: a tenant's receiver that fails twice gets
// three attempts of one delivery with the same body byte for byte: the
// payload's timestamp is the event's time; only the webhook-timestamp
// header (which the signature covers) tells the attempts apart.
func TestRetriesSendSameBody(t *testing.T) {
	s := e2etest.StartServer(t, fastRetries)
	team := s.NewTeam("same-body")
	rcv := newReceiver(t, func(n int) int {
		if n <= 2 {
			return http.StatusServiceUnavailable
		}
		return http.StatusNoContent
	})
	hook := addWebhook(t, team, rcv.URL, "sandbox.running")
	sb := e2etest.Create(t, team, api.CreateSandboxRequest{})
	rcv.waitFor(t, "three attempts", func(got []received) bool { return len(got) >= 3 })
	waitDelivered(t, team, hook.Webhook.ID, 1)
	got := rcv.requests()
	if len(got) != 3 {
		t.Fatalf("the receiver got %d requests, want 3: %s", len(got), summary(got))
	}
	for i, r := range got {
		if err := verify(hook.Secret, r); err != nil {
			t.Errorf("attempt %d: %v", i+1, err)
		}
		if r.ID != got[0].ID || !bytes.Equal(r.Body, got[0].Body) {
			t.Errorf("attempt %d differs from the first:\n  %s %s\n  %s %s", i+1, r.ID, r.Body, got[0].ID, got[0].Body)
		}
	}
	p := decodePayload(t, got[0])
	if p.Data.SandboxID != sb.ID || !p.Timestamp.Equal(p.Data.Time) {
		t.Errorf("payload timestamp %v, event time %v: %s", p.Timestamp, p.Data.Time, got[0].Body)
	}
}

// TestIdempotentCreateKeepsNoSecret: a tenant creates a webhook with an
// Idempotency-Key; the answer kept for replays (the idempotency table)
// holds no signing secret, and a replay of the key answers the same
// webhook with the same secret, read again from the webhook, and creates
// nothing new.
func TestIdempotentCreateKeepsNoSecret(t *testing.T) {
	s := e2etest.StartServer(t, fastRetries)
	tr, err := s.Admin.CreateTeam(t.Context(), "idem-hooks")
	if err != nil {
		t.Fatal(err)
	}
	team := cove.New(s.URL, tr.APIKey)
	rcv := newReceiver(t, nil)
	post := func() (int, string, api.CreateWebhookResponse) {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), "POST", s.URL+"/v1/webhooks",
			strings.NewReader(`{"url":"`+rcv.URL+`","events":["sandbox.*"]}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+tr.APIKey)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", "hook-once")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		var out api.CreateWebhookResponse
		if resp.StatusCode == http.StatusCreated {
			if err := json.Unmarshal(body, &out); err != nil {
				t.Fatalf("answer %s: %v", body, err)
			}
		}
		return resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), out
	}
	status, replayed, first := post()
	if status != http.StatusCreated || replayed != "" || !strings.HasPrefix(first.Secret, "whsec_") {
		t.Fatalf("create: %d replayed=%q %+v", status, replayed, first)
	}

	waitKept(t, filepath.Join(s.DataDir, "cove.db"), tr.Team.ID, "hook-once")
	db, err := sql.Open("sqlite", "file:"+filepath.Join(s.DataDir, "cove.db")+"?mode=ro&_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var kept []byte
	if err := db.QueryRowContext(t.Context(), "SELECT body FROM idempotency WHERE team_id = ? AND key = ?", tr.Team.ID, "hook-once").Scan(&kept); err != nil {
		t.Fatalf("the kept answer: %v", err)
	}
	secretB64 := strings.TrimPrefix(first.Secret, "whsec_")
	if bytes.Contains(kept, []byte(secretB64)) || bytes.Contains(kept, []byte("whsec_")) || !bytes.Contains(kept, []byte(first.Webhook.ID)) {
		t.Errorf("the answer kept for replays holds the secret (or not the webhook): %s", kept)
	}

	status, replayed, again := post()
	if status != http.StatusCreated || replayed != "true" || again.Webhook.ID != first.Webhook.ID || again.Secret != first.Secret {
		t.Errorf("replay: %d replayed=%q %+v; want %+v", status, replayed, again, first)
	}
	l, err := team.ListWebhooks(t.Context(), 0, "")
	if err != nil || len(l.Items) != 1 || l.Items[0].ID != first.Webhook.ID {
		t.Errorf("webhooks after a replay: %+v %v", l, err)
	}
	// A replay after the webhook is gone creates nothing either.
	if err := team.DeleteWebhook(context.WithoutCancel(t.Context()), first.Webhook.ID); err != nil {
		t.Fatal(err)
	}
	if status, _, gone := post(); status != http.StatusNotFound || gone.Secret != "" {
		t.Errorf("replay after delete: %d %+v", status, gone)
	}
	if l, err := team.ListWebhooks(t.Context(), 0, ""); err != nil || len(l.Items) != 0 {
		t.Errorf("webhooks after a replay of a deleted one: %+v %v", l, err)
	}
}

// TestNodeAddressRefusedAtDial: without --webhook-allow-private, a
// tenant's webhook never reaches an address of the node itself, though
// it is public, as the egress gateway never dials one. The test puts a
// public address (a /32 on a veth of its own: traffic to it stays on
// the node) on the node after the webhook is created,
// with a receiver listening there: the delivery is refused at dial and
// the receiver gets nothing; a webhook created with that address now is
// refused at once.
func TestNodeAddressRefusedAtDial(t *testing.T) {
	s := e2etest.StartServer(t, e2etest.WithArgs("--webhook-backoff", "100ms", "--webhook-max-backoff", "200ms",
		"--webhook-poll", "100ms", "--warm-pool", "0"))
	team := s.NewTeam("node-addr")
	b := make([]byte, 3)
	rand.Read(b)
	// 100.128.0.0/9 is public unicast, outside the shared 100.64.0.0/10.
	addr := netip.AddrFrom4([4]byte{100, 128 | b[0]&63, b[1], b[2] | 1})
	link, peer := "cvwa"+hex.EncodeToString(b), "cvwb"+hex.EncodeToString(b)
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v %s", args, err, out)
		}
	}
	hookURL := "http://" + addr.String() + ":8089/hook"
	hook := addWebhook(t, team, hookURL, "sandbox.running")

	ip("link", "add", link, "type", "veth", "peer", "name", peer)
	t.Cleanup(func() { exec.Command("ip", "link", "del", link).Run() })
	ip("addr", "add", addr.String()+"/32", "dev", link)
	ip("link", "set", link, "up")
	ln, err := net.Listen("tcp", addr.String()+":8089")
	if err != nil {
		t.Fatal(err)
	}
	rcv := newReceiver(t, nil)
	// Its handler, served on the node's address too.
	srv := &http.Server{Handler: rcv.Config.Handler}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })

	e2etest.Create(t, team, api.CreateSandboxRequest{})
	var d api.Delivery
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		l, err := team.ListDeliveries(t.Context(), hook.Webhook.ID, 10, "")
		if err != nil {
			t.Fatal(err)
		}
		if len(l.Items) == 1 && l.Items[0].AttemptCount >= 1 {
			d = l.Items[0]
			break
		}
		if len(rcv.requests()) > 0 || time.Now().After(deadline) {
			t.Fatalf("deliveries %+v; the receiver on the node's address got %s", l.Items, summary(rcv.requests()))
		}
	}
	if len(rcv.requests()) != 0 || d.State == api.DeliveryDelivered || !strings.Contains(d.Attempts[0].Error, "address of this node") {
		t.Errorf("delivery %+v; the receiver on the node's address got %s", d, summary(rcv.requests()))
	}
	status, er, body := e2etest.RawRequest(t, "POST", s.URL+"/v1/webhooks", s.AdminKey, `{"url":"`+hookURL+`"}`)
	if status != http.StatusBadRequest || er.Error == nil || !strings.Contains(er.Error.Message, "address of this node") {
		t.Errorf("create a webhook to the node's address: %d %s", status, body)
	}
}

// TestTarpitDoesNotStarveOtherTeams: team A points 8 webhooks at a
// tarpit (it accepts and never answers, so each attempt is held for the
// whole --webhook-timeout) and keeps making events; team B's receiver
// still gets its sandbox.running while A's first attempts are held open:
// A has its share of the dispatcher's slots, not all of them.
func TestTarpitDoesNotStarveOtherTeams(t *testing.T) {
	s := e2etest.StartServer(t, fastRetries, e2etest.WithArgs("--webhook-timeout", "60s"))
	teamA, teamB := s.NewTeam("tarpit-a"), s.NewTeam("tarpit-b")
	tp := newTarpit(t)
	for i := range 8 {
		addWebhook(t, teamA, fmt.Sprintf("%s/hook%d", tp.URL, i))
	}
	sbA := e2etest.Create(t, teamA, api.CreateSandboxRequest{})
	for deadline := time.Now().Add(90 * time.Second); len(tp.open()) < 2; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the tarpit holds %d attempts, want at least 2", len(tp.open()))
		}
	}
	held := tp.open()

	// A steady stream of A's events meanwhile, each queued for 8 webhooks.
	stop := make(chan struct{})
	var load sync.WaitGroup
	load.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			teamA.ExecWait(ctx, sbA.ID, api.CreateCommandRequest{Command: "true"})
			cancel()
		}
	})
	defer load.Wait()
	defer close(stop)

	rcv := newReceiver(t, nil)
	hook := addWebhook(t, teamB, rcv.URL, "sandbox.running")
	sbB := e2etest.Create(t, teamB, api.CreateSandboxRequest{})
	got := rcv.waitFor(t, "B's sandbox.running", func(got []received) bool { return len(got) > 0 })
	if err := verify(hook.Secret, got[0]); err != nil {
		t.Fatal(err)
	}
	if p := decodePayload(t, got[0]); p.Type != "sandbox.running" || p.Data.SandboxID != sbB.ID {
		t.Fatalf("B's receiver got %s", got[0].Body)
	}
	for i, c := range held {
		if closed := tp.closedAt(c); !closed.IsZero() && !closed.After(got[0].At) {
			t.Errorf("A's attempt %d was let go (%v) before B's delivery came (%v): B waited behind A's tarpit",
				i, closed.Format(time.StampMicro), got[0].At.Format(time.StampMicro))
		}
	}
	t.Logf("the tarpit held %d of A's attempts when B's came; %d connections in all", len(held), tp.count())
}

// TestBacklogBoundedDropNoticeFirst: a tenant whose receiver holds its
// first delivery while the team keeps making events has its pending
// backlog bounded by --webhook-backlog: past it the oldest deliveries
// fail with reason backlog_full, and webhook.dropped events say how many.
// Once the receiver answers again, those notices are the next deliveries
// it gets, before the backlog they were queued after.
func TestBacklogBoundedDropNoticeFirst(t *testing.T) {
	const backlog = 20
	s := e2etest.StartServer(t, fastRetries, e2etest.WithArgs("--webhook-backlog", fmt.Sprint(backlog)))
	team := s.NewTeam("backlog")
	release := make(chan struct{})
	var (
		mu   sync.Mutex
		got  []payload
		once sync.Once
	)
	rcv := httptestServer(t, func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var p payload
		json.Unmarshal(body, &p)
		first := false
		once.Do(func() { first = true })
		if first {
			// Held until the backlog overflowed, then failed: it stays
			// dropped.
			select {
			case <-release:
			case <-r.Context().Done():
			}
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		mu.Lock()
		got = append(got, p)
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	})
	hook := addWebhook(t, team, rcv, "sandbox.*", "command.*")
	sb := e2etest.Create(t, team, api.CreateSandboxRequest{})

	dropped := func() []api.Event {
		l, err := team.Events(t.Context(), cove.EventQuery{Types: []string{api.EventWebhookDropped}, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		return l.Items
	}
	for i := 0; len(dropped()) == 0; i++ {
		if i > 100 {
			t.Fatalf("no webhook.dropped after %d commands", i)
		}
		e2etest.MustOK(t, team, sb.ID, "true")
	}
	notices := dropped()
	close(release)

	// Everything left is delivered; the notices first.
	var ds []api.Delivery
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		l, err := team.ListDeliveries(t.Context(), hook.Webhook.ID, 1000, "")
		if err != nil {
			t.Fatal(err)
		}
		ds = l.Items
		pending := 0
		for _, d := range ds {
			if d.State == api.DeliveryPending {
				pending++
			}
		}
		if pending == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d deliveries still pending", pending)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	var types []string
	for _, p := range got {
		types = append(types, p.Type)
	}
	for i, n := range notices {
		if i >= len(got) || got[i].Data.ID != n.ID {
			t.Errorf("notice %s is not delivery %d after the receiver answered again; it got %v", n.ID, i+1, types)
		}
	}
	total := 0
	for _, n := range notices {
		c, _ := n.Data["dropped"].(float64)
		total += int(c)
		if n.Data["reason"] != api.ReasonBacklogFull || c < 1 {
			t.Errorf("notice %+v", n)
		}
	}
	failed := 0
	for _, d := range ds {
		switch {
		case d.State == api.DeliveryFailed && d.Reason == api.ReasonBacklogFull:
			failed++
		case d.State != api.DeliveryDelivered:
			t.Errorf("delivery %+v", d)
		}
	}
	if failed != total || failed == 0 {
		t.Errorf("%d deliveries failed with backlog_full; the notices say %d", failed, total)
	}
	if pendingMax := len(ds) - len(notices) - failed; pendingMax > backlog {
		t.Errorf("%d deliveries kept, past the backlog of %d", pendingMax, backlog)
	}
}

// httptestServer serves h on loopback until the test ends and returns
// its URL.
func httptestServer(t *testing.T, h http.HandlerFunc) string {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}
