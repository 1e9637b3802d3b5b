package webhooks

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/internal/store/sqlite"
)

// The outbox's rules, each over a real SQLite store and the dispatcher,
// in a synctest bubble: time is the bubble's fake clock, and receivers are
// a RoundTripper in memory, so no test waits on the wall clock.

// received is one attempt as a receiver saw it.
type received struct {
	team, webhook string
	event         api.Event
	at            time.Time
}

// outbox is a store, a dispatcher over it (started by run) and the
// receivers of its webhooks.
type outbox struct {
	t  *testing.T
	st *sqlite.DB
	d  *Dispatcher
	// answer decides a receiver's status (and may block); nil answers 204.
	answer func(r received, ctx context.Context) int

	mu       sync.Mutex
	got      []received
	inFlight map[string]int // per webhook
	maxHook  int            // most attempts of one webhook in flight at once
	perTeam  map[string]int // in flight per team
	maxTeam  map[string]int
}

// openOutbox opens a store with teams and a dispatcher with cfg; call it
// inside the bubble.
func openOutbox(t *testing.T, cfg Config, teams ...string) *outbox {
	t.Helper()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "cove.db"))
	if err != nil {
		t.Fatal(err)
	}
	for _, team := range teams {
		if err := st.CreateTeam(t.Context(), api.Team{ID: team, Name: strings.TrimPrefix(team, "team_"), CreatedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	cfg.OpenSecret = testOpen
	cfg.AllowPrivate = true
	d, err := New(cfg, st, nil, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	o := &outbox{t: t, st: st, d: d, inFlight: map[string]int{}, perTeam: map[string]int{}, maxTeam: map[string]int{}}
	d.client.Transport = o
	return o
}

// run starts the dispatcher until the test ends.
func (o *outbox) run() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		o.d.Run(ctx)
	}()
	o.t.Cleanup(func() {
		cancel()
		<-done
		o.st.Close()
	})
}

func (o *outbox) hook(team, id string, events ...string) {
	o.t.Helper()
	w := store.Webhook{Webhook: api.Webhook{ID: id, TeamID: team, URL: "http://receiver.test/" + id, Events: events, CreatedAt: time.Now()},
		Secret: testSeal(team, id, NewSecret())}
	if err := o.st.CreateWebhook(o.t.Context(), w); err != nil {
		o.t.Fatal(err)
	}
}

func (o *outbox) event(team, typ string) api.Event {
	o.t.Helper()
	e, err := o.st.AppendEvent(o.t.Context(), team, api.Event{Type: typ, SandboxID: "sbx_1", Time: time.Now().UTC()})
	if err != nil {
		o.t.Fatal(err)
	}
	return e
}

func (o *outbox) received() []received {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.got)
}

func (o *outbox) deliveries(webhookID string) []api.Delivery {
	o.t.Helper()
	l, err := o.st.ListDeliveries(o.t.Context(), store.DeliveryFilter{WebhookID: webhookID})
	if err != nil {
		o.t.Fatal(err)
	}
	slices.Reverse(l) // oldest first
	return l
}

// RoundTrip is every receiver: it records the attempt and answers.
func (o *outbox) RoundTrip(req *http.Request) (*http.Response, error) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return nil, err
	}
	var p Payload
	if err := json.Unmarshal(body, &p); err != nil {
		return nil, err
	}
	hook := strings.TrimPrefix(req.URL.Path, "/")
	// Webhook IDs here are TEAM.NAME.
	r := received{team: strings.SplitN(hook, ".", 2)[0], webhook: hook, event: p.Data, at: time.Now()}
	o.mu.Lock()
	o.got = append(o.got, r)
	o.inFlight[hook]++
	o.maxHook = max(o.maxHook, o.inFlight[hook])
	o.perTeam[r.team]++
	o.maxTeam[r.team] = max(o.maxTeam[r.team], o.perTeam[r.team])
	o.mu.Unlock()
	defer func() {
		o.mu.Lock()
		o.inFlight[hook]--
		o.perTeam[r.team]--
		o.mu.Unlock()
	}()
	status := http.StatusNoContent
	if o.answer != nil {
		status = o.answer(r, req.Context())
	}
	if err := req.Context().Err(); err != nil {
		return nil, err
	}
	return &http.Response{StatusCode: status, Body: http.NoBody, Header: http.Header{}, Request: req}, nil
}

// TestOutboxOrder: a webhook has one attempt in flight at a time, so its
// deliveries reach the receiver in the order of their events, however
// long each attempt takes.
func TestOutboxOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := DefaultConfig()
		o := openOutbox(t, cfg, "team_a")
		o.hook("team_a", "team_a.h1", "*")
		// Later events are answered sooner: attempts running side by side
		// would end out of order.
		var want []string
		for range 6 {
			want = append(want, o.event("team_a", "sandbox.running").ID)
		}
		o.answer = func(r received, ctx context.Context) int {
			i := slices.Index(want, r.event.ID)
			time.Sleep(time.Duration(len(want)-i) * time.Second)
			return http.StatusOK
		}
		o.run()
		time.Sleep(time.Minute)
		synctest.Wait()
		var got []string
		for _, r := range o.received() {
			got = append(got, r.event.ID)
		}
		if !slices.Equal(got, want) {
			t.Errorf("received %v; want the events' order %v", got, want)
		}
		if o.maxHook != 1 {
			t.Errorf("%d attempts of one webhook were in flight at once; want 1", o.maxHook)
		}
		for _, d := range o.deliveries("team_a.h1") {
			if d.State != api.DeliveryDelivered {
				t.Errorf("delivery %s is %s; want delivered", d.ID, d.State)
			}
		}
	})
}

// TestOutboxBackoff: a failed attempt is retried after the backoff, which
// doubles up to MaxBackoff, until one succeeds or the next try would fall
// past RetryFor after the event, when the delivery fails.
func TestOutboxBackoff(t *testing.T) {
	for _, tt := range []struct {
		name      string
		failures  int // attempts that answer 500 before one answers 200
		retryFor  time.Duration
		wantGaps  []time.Duration // between consecutive attempts
		wantState api.DeliveryState
	}{
		{"delivered on the first try", 0, time.Hour, nil, api.DeliveryDelivered},
		{"doubling, then capped", 5, time.Hour,
			[]time.Duration{5 * time.Second, 10 * time.Second, 20 * time.Second, 30 * time.Second, 30 * time.Second}, api.DeliveryDelivered},
		{"given up past the retry window", 100, time.Minute,
			[]time.Duration{5 * time.Second, 10 * time.Second, 20 * time.Second}, api.DeliveryFailed},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg := DefaultConfig()
				cfg.Backoff, cfg.MaxBackoff, cfg.RetryFor = 5*time.Second, 30*time.Second, tt.retryFor
				o := openOutbox(t, cfg, "team_a")
				o.hook("team_a", "team_a.h1", "*")
				n := 0
				o.answer = func(received, context.Context) int {
					if n++; n <= tt.failures {
						return http.StatusInternalServerError
					}
					return http.StatusOK
				}
				o.event("team_a", "sandbox.running")
				o.run()
				time.Sleep(5 * time.Minute)
				synctest.Wait()
				got := o.received()
				var gaps []time.Duration
				for i := 1; i < len(got); i++ {
					gaps = append(gaps, got[i].at.Sub(got[i-1].at))
				}
				if !slices.Equal(gaps, tt.wantGaps) {
					t.Errorf("attempts %v apart; want %v", gaps, tt.wantGaps)
				}
				d := o.deliveries("team_a.h1")
				if len(d) != 1 || d[0].State != tt.wantState || d[0].AttemptCount != len(got) {
					t.Errorf("delivery %+v; want %s after %d attempts", d, tt.wantState, len(got))
				}
			})
		})
	}
}

// TestOutboxFairness: a team whose receivers hold every attempt until it
// times out (a tarpit) has at most TeamConcurrency attempts in flight, so
// another team's delivery goes out at once instead of after the timeout.
func TestOutboxFairness(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := DefaultConfig()
		cfg.Timeout, cfg.Poll = 10*time.Second, time.Second
		o := openOutbox(t, cfg, "team_a", "team_b")
		for i := range cfg.Concurrency {
			o.hook("team_a", "team_a.tarpit"+string(rune('0'+i)), "*")
		}
		o.hook("team_b", "team_b.h1", "*")
		o.answer = func(r received, ctx context.Context) int {
			if r.team == "team_a" {
				<-ctx.Done() // held until the attempt's timeout
			}
			return http.StatusOK
		}
		for range 3 {
			o.event("team_a", "sandbox.running")
		}
		o.run()
		synctest.Wait() // team A's attempts are under way
		start := time.Now()
		o.event("team_b", "sandbox.running")
		time.Sleep(time.Minute)
		synctest.Wait()
		var b []received
		for _, r := range o.received() {
			if r.team == "team_b" {
				b = append(b, r)
			}
		}
		if len(b) != 1 || b[0].at.Sub(start) >= cfg.Timeout {
			t.Errorf("team b's delivery: %+v; want it within %v of its event at %v, not behind team a's tarpits", b, cfg.Timeout, start)
		}
		if o.maxTeam["team_a"] > cfg.TeamConcurrency {
			t.Errorf("team a had %d attempts in flight; want at most %d", o.maxTeam["team_a"], cfg.TeamConcurrency)
		}
	})
}

// TestOutboxBacklog: a team's pending deliveries are bounded by the
// backlog; past it the oldest fail as backlog_full, and webhook.dropped
// notices saying how many go out before what is left, which is the newest
// events in order.
func TestOutboxBacklog(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const backlog, events = 10, 30
		cfg := DefaultConfig()
		o := openOutbox(t, cfg, "team_a")
		o.st.SetWebhookBacklog(backlog)
		o.hook("team_a", "team_a.h1", "sandbox.*")
		var appended []string
		for range events {
			appended = append(appended, o.event("team_a", "sandbox.running").ID)
		}
		o.run() // the receiver was away while the events came
		time.Sleep(time.Minute)
		synctest.Wait()

		got := o.received()
		dropped, notices := 0, 0
		var rest []string
		for _, r := range got {
			if r.event.Type == api.EventWebhookDropped {
				if len(rest) > 0 {
					t.Errorf("a webhook.dropped notice came after %d of the backlog's deliveries; want it first", len(rest))
				}
				notices++
				n, _ := r.event.Data["dropped"].(float64)
				dropped += int(n)
				continue
			}
			rest = append(rest, r.event.ID)
		}
		if notices == 0 || len(rest) > backlog {
			t.Fatalf("%d notices, %d of %d events delivered; want notices and at most the backlog (%d)", notices, len(rest), events, backlog)
		}
		if dropped+len(rest) != events {
			t.Errorf("notices say %d dropped and %d were delivered; want %d in all", dropped, len(rest), events)
		}
		if want := appended[events-len(rest):]; !slices.Equal(rest, want) {
			t.Errorf("delivered %v; want the newest events in order %v", rest, want)
		}
		failed := 0
		for _, d := range o.deliveries("team_a.h1") {
			if d.State == api.DeliveryFailed && d.Reason == api.ReasonBacklogFull {
				failed++
			}
		}
		if failed != dropped {
			t.Errorf("%d deliveries failed as %s; the notices say %d", failed, api.ReasonBacklogFull, dropped)
		}
	})
}
