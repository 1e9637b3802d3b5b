package webhooks

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/netpolicy"
	"github.com/cove-dev/cove/internal/store"
)

// Store is what the dispatcher needs of the store.
type Store interface {
	DueDeliveries(ctx context.Context, t time.Time, perTeam int) ([]store.DueDelivery, error)
	NextDeliveryAt(ctx context.Context) (time.Time, bool, error)
	ClaimDelivery(ctx context.Context, deliveryID string, attempts int, now, until time.Time) (bool, error)
	RecordAttempt(ctx context.Context, deliveryID string, a api.DeliveryAttempt, state api.DeliveryState, next *time.Time) error
}

// Observer is told the outcome of every attempt: "delivered", "retry"
// (failed, tried again later) or "failed" (given up), and its latency.
type Observer interface {
	WebhookAttempt(outcome string, latency time.Duration)
}

// Config configures a Dispatcher; DefaultConfig holds the defaults.
type Config struct {
	// Concurrency bounds the attempts in flight; a webhook has at most
	// one in flight, so its deliveries go out in event order. Default 8.
	Concurrency int
	// TeamConcurrency bounds one team's attempts in flight, so that a
	// team whose receivers hold every attempt for the whole Timeout (a
	// tarpit) leaves the other slots to other teams; free slots are
	// handed out round-robin across teams. Default 2, at most Concurrency.
	TeamConcurrency int
	// Backlog bounds a team's pending deliveries; past it the oldest fail
	// (backlog_full) and a webhook.dropped event says how many. The store
	// enforces it (store.DefaultWebhookBacklog). Default 10000.
	Backlog int
	// Timeout bounds one attempt: dialling, sending, the answer's headers
	// and up to 64 KiB of its body. Default 10s.
	Timeout time.Duration
	// Backoff is the wait before the first retry; each next one doubles,
	// up to MaxBackoff. Defaults 5s and 10m.
	Backoff    time.Duration
	MaxBackoff time.Duration
	// RetryFor bounds how long after its event a delivery is retried;
	// then it fails. Default 24h.
	RetryFor time.Duration
	// AllowPrivate lets webhooks reach private, loopback and other
	// non-public addresses (cloud metadata addresses never). Default off.
	AllowPrivate bool
	// Poll is how often the outbox is read when nothing wakes the
	// dispatcher (another process may have filled it). Default 5s.
	Poll time.Duration
	// Coalesce is the least time between two reads of the outbox that
	// changes prompt: every event wakes the dispatcher, a command makes
	// several, and reading the outbox at each one was a tenth of the
	// server's CPU per command, webhooks or none. A new delivery goes out
	// at most this much later. Default 20ms; 0 reads at every change.
	Coalesce time.Duration
	// IsNodeAddr reports whether a connection to an address would stay
	// on this node; deliveries never dial one unless AllowPrivate. Default
	// (nil) netpolicy.IsNodeAddr, the egress gateway's own view.
	IsNodeAddr func(netip.Addr) bool
	// OpenSecret returns the signing secret of a webhook from what the
	// store holds for it (sealed at rest by the control plane, which owns
	// the key). Required: New refuses a dispatcher without it.
	OpenSecret SecretOpener
}

// SecretOpener opens the stored secret of a team's webhook. Its error is
// the server's: an attempt it fails records only that the secret did not
// open.
type SecretOpener func(teamID, webhookID, stored string) (string, error)

// DefaultConfig is the dispatcher's configuration with every default.
func DefaultConfig() Config {
	return Config{Concurrency: 8, TeamConcurrency: 2, Backlog: store.DefaultWebhookBacklog, Timeout: 10 * time.Second, Backoff: 5 * time.Second,
		MaxBackoff: 10 * time.Minute, RetryFor: 24 * time.Hour, Poll: 5 * time.Second, Coalesce: 20 * time.Millisecond}
}

// Validate reports a configuration that cannot work.
func (c *Config) Validate() error {
	switch {
	case c.Concurrency < 1:
		return fmt.Errorf("webhook concurrency %d: want at least 1", c.Concurrency)
	case c.TeamConcurrency < 1 || c.TeamConcurrency > c.Concurrency:
		return fmt.Errorf("webhook team concurrency %d: want 1 to the webhook concurrency %d", c.TeamConcurrency, c.Concurrency)
	case c.Backlog < 1:
		return fmt.Errorf("webhook backlog %d: want at least 1", c.Backlog)
	case c.Timeout <= 0 || c.Backoff <= 0 || c.Poll <= 0:
		return fmt.Errorf("webhook timeout %v, backoff %v, poll %v: want all above 0", c.Timeout, c.Backoff, c.Poll)
	case c.MaxBackoff < c.Backoff:
		return fmt.Errorf("webhook max backoff %v: want at least the backoff %v", c.MaxBackoff, c.Backoff)
	case c.RetryFor < 0:
		return fmt.Errorf("webhook retry window %v: want 0 or more", c.RetryFor)
	case c.Coalesce < 0:
		return fmt.Errorf("webhook coalesce %v: want 0 or more", c.Coalesce)
	}
	return nil
}

// maxResponse is how much of a receiver's answer is read (and dropped).
const maxResponse = 64 << 10

// Dispatcher sends the outbox. Run is its one owner goroutine; the
// attempts it starts are its children and end before it returns.
type Dispatcher struct {
	cfg    Config
	st     Store
	wake   func() <-chan struct{}
	log    *slog.Logger
	client *http.Client
	obs    Observer
	now    func() time.Time
	// coalescing, when set (by tests), is told each time a change waits
	// for Coalesce to pass before the outbox is read.
	coalescing chan<- struct{}
}

// New returns a dispatcher over st; it starts nothing. wake returns a
// channel closed at the next change (the server's Changes), so that new
// events go out at once; obs may be nil.
func New(cfg Config, st Store, wake func() <-chan struct{}, obs Observer, log *slog.Logger) (*Dispatcher, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.OpenSecret == nil {
		return nil, errors.New("webhooks: no OpenSecret: the dispatcher cannot sign with sealed secrets")
	}
	if cfg.IsNodeAddr == nil {
		cfg.IsNodeAddr = netpolicy.IsNodeAddr
	}
	dialer := &net.Dialer{Timeout: cfg.Timeout, Control: dialControl(cfg.AllowPrivate, cfg.IsNodeAddr)}
	tr := &http.Transport{
		Proxy:                 nil, // never the environment's proxy: the dial check must see the receiver
		DialContext:           dialer.DialContext,
		TLSHandshakeTimeout:   cfg.Timeout,
		ResponseHeaderTimeout: cfg.Timeout,
		MaxIdleConnsPerHost:   2,
		IdleConnTimeout:       90 * time.Second,
		ForceAttemptHTTP2:     true,
	}
	client := &http.Client{
		Transport: tr,
		// Redirects are never followed: a receiver's 3xx is a failed
		// attempt, so no answer can send a delivery to another address.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	if wake == nil {
		wake = func() <-chan struct{} { return nil }
	}
	return &Dispatcher{cfg: cfg, st: st, wake: wake, log: log, client: client, obs: obs,
		now: func() time.Time { return time.Now().UTC() }}, nil
}

// Run sends due deliveries until ctx is done, then waits for the attempts
// under way (which ctx cancels; a cancelled attempt is not recorded and
// is sent again after a restart) and returns nil.
func (d *Dispatcher) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	defer d.client.CloseIdleConnections()
	busy := map[string]string{} // webhooks with an attempt in flight → their team
	perTeam := map[string]int{} // attempts in flight of each team
	last := ""                  // the team served last, for the round-robin
	done := make(chan string, d.cfg.Concurrency)
	timer := time.NewTimer(0)
	defer timer.Stop()
	ended := func(wh string) {
		team := busy[wh]
		delete(busy, wh)
		if perTeam[team]--; perTeam[team] <= 0 {
			delete(perTeam, team)
		}
	}
	var lastRead time.Time
	for {
		changed := d.wake()
		lastRead = time.Now()
		if len(busy) < d.cfg.Concurrency {
			due, err := d.st.DueDeliveries(ctx, d.now(), d.cfg.TeamConcurrency)
			if err != nil && ctx.Err() == nil {
				d.log.Warn("read the webhook outbox", "err", err)
			}
			for _, dd := range pick(due, busy, perTeam, last, d.cfg.Concurrency-len(busy), d.cfg.TeamConcurrency) {
				wh := dd.Delivery.WebhookID
				busy[wh] = dd.TeamID
				perTeam[dd.TeamID]++
				last = dd.TeamID
				wg.Go(func() {
					d.attempt(ctx, dd)
					done <- wh
				})
			}
		}
		wait := d.cfg.Poll
		if next, ok, err := d.st.NextDeliveryAt(ctx); err == nil && ok {
			// A due delivery of a busy webhook waits for its attempt to end
			// (done), not for the clock.
			if until := next.Sub(d.now()); until > 0 && until < wait {
				wait = until
			}
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return nil
		case wh := <-done:
			ended(wh)
		case <-changed:
			if !d.coalesce(ctx, lastRead, done, ended) {
				return nil
			}
		case <-timer.C:
		}
		// Take every attempt that ended meanwhile.
		for drained := false; !drained; {
			select {
			case wh := <-done:
				ended(wh)
			default:
				drained = true
			}
		}
	}
}

// coalesce waits until Coalesce has passed since the outbox was last
// read, taking the attempts that end meanwhile; false when ctx ended.
func (d *Dispatcher) coalesce(ctx context.Context, lastRead time.Time, done <-chan string, ended func(string)) bool {
	gap := d.cfg.Coalesce - time.Since(lastRead)
	if gap <= 0 {
		return true
	}
	if d.coalescing != nil {
		d.coalescing <- struct{}{}
	}
	t := time.NewTimer(gap)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case wh := <-done:
			ended(wh)
		case <-t.C:
			return true
		}
	}
}

// pick chooses up to free of the due deliveries (ordered by team, as the
// store returns them) to attempt now: one per team in turn, starting with
// the team after last, skipping webhooks with an attempt in flight (busy)
// and teams with perTeamMax in flight, until free is used or none is left.
func pick(due []store.DueDelivery, busy map[string]string, inFlight map[string]int, last string, free, perTeamMax int) []store.DueDelivery {
	var teams []string
	queue := map[string][]store.DueDelivery{}
	for _, dd := range due {
		if _, ok := busy[dd.Delivery.WebhookID]; ok {
			continue
		}
		if _, ok := queue[dd.TeamID]; !ok {
			teams = append(teams, dd.TeamID)
		}
		queue[dd.TeamID] = append(queue[dd.TeamID], dd)
	}
	slices.Sort(teams)
	first, _ := slices.BinarySearch(teams, last+"\x00") // the first team after last
	teams = slices.Concat(teams[first:], teams[:first])
	taken := map[string]int{}
	var out []store.DueDelivery
	for more := true; more && len(out) < free; {
		more = false
		for _, team := range teams {
			if len(out) >= free {
				break
			}
			q := queue[team]
			if len(q) == 0 || inFlight[team]+taken[team] >= perTeamMax {
				continue
			}
			out = append(out, q[0])
			queue[team] = q[1:]
			taken[team]++
			more = true
		}
	}
	return out
}

// Payload is the body of a delivery, shaped as Standard Webhooks suggests:
// the event's type, the event's time, and the event as GET /v1/events
// shows it. It holds nothing of the attempt, so every attempt of a
// delivery sends the same bytes; the attempt's time is the
// webhook-timestamp header, which the signature covers.
type Payload struct {
	Type      string    `json:"type"`
	Timestamp time.Time `json:"timestamp"`
	Data      api.Event `json:"data"`
}

// attempt sends one delivery once and records the outcome.
func (d *Dispatcher) attempt(ctx context.Context, dd store.DueDelivery) {
	log := d.log.With("delivery", dd.Delivery.ID, "webhook", dd.Delivery.WebhookID, "event", dd.Delivery.EventID)
	start := d.now()
	// Claimed first: a dispatcher on another replica that read the same
	// delivery (two leaders for a moment) finds it taken and sends
	// nothing. A claim outlives the attempt's timeout, so that a
	// dispatcher that dies mid-attempt leaves it due again soon after.
	claimed, err := d.st.ClaimDelivery(ctx, dd.Delivery.ID, dd.Delivery.AttemptCount, start, start.Add(d.cfg.Timeout+claimMargin))
	if err != nil || !claimed {
		if err != nil && ctx.Err() == nil {
			log.Warn("claim a webhook delivery", "err", err)
		}
		return
	}
	a := api.DeliveryAttempt{Time: start}
	if dd.Event.ID == "" {
		a.Error = "the event expired before it could be delivered"
		d.record(ctx, log, dd, a, false)
		return
	}
	status, err := d.post(ctx, dd, start)
	if ctx.Err() != nil {
		return // shutting down: the delivery stays pending
	}
	a.StatusCode = status
	a.LatencyMS = d.now().Sub(start).Milliseconds()
	switch {
	case err != nil:
		a.Error = err.Error()
	case status < 200 || status > 299:
		a.Error = fmt.Sprintf("the receiver answered %d %s", status, http.StatusText(status))
	}
	d.record(ctx, log, dd, a, a.Error == "")
}

// claimMargin is how long past its attempt's timeout a claimed delivery
// stays taken: the attempt's recording comes within it.
const claimMargin = 5 * time.Second

// post sends the delivery and returns the receiver's status.
func (d *Dispatcher) post(ctx context.Context, dd store.DueDelivery, now time.Time) (int, error) {
	body, err := json.Marshal(Payload{Type: dd.Event.Type, Timestamp: dd.Event.Time, Data: dd.Event})
	if err != nil {
		return 0, err
	}
	secret, err := d.cfg.OpenSecret(dd.TeamID, dd.Delivery.WebhookID, dd.Secret)
	if err != nil {
		// The team sees that it failed, the operator's log why.
		d.log.Error("open a webhook's secret", "webhook", dd.Delivery.WebhookID, "team", dd.TeamID, "err", err)
		return 0, errors.New("the webhook's signing secret could not be opened on this server")
	}
	ts := now.Unix()
	sig, err := Sign(secret, dd.Delivery.ID, ts, body)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, d.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, dd.URL, bytes.NewReader(body))
	if err != nil {
		return 0, fmt.Errorf("webhook URL: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "cove-webhooks/1")
	req.Header.Set("webhook-id", dd.Delivery.ID)
	req.Header.Set("webhook-timestamp", strconv.FormatInt(ts, 10))
	req.Header.Set("webhook-signature", sig)
	resp, err := d.client.Do(req)
	if err != nil {
		var ref *refusedError
		if errors.As(err, &ref) {
			return 0, ref
		}
		if errors.Is(err, context.DeadlineExceeded) {
			return 0, fmt.Errorf("no answer within %v", d.cfg.Timeout)
		}
		return 0, errors.Unwrap(err) // *url.Error repeats the URL: drop it
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, io.LimitReader(resp.Body, maxResponse))
	return resp.StatusCode, nil
}

// record stores an attempt: delivered, retried after the backoff, or
// failed once the retry window is over.
func (d *Dispatcher) record(ctx context.Context, log *slog.Logger, dd store.DueDelivery, a api.DeliveryAttempt, ok bool) {
	state, outcome := api.DeliveryDelivered, "delivered"
	var next *time.Time
	if !ok {
		state, outcome = api.DeliveryFailed, "failed"
		if dd.Event.ID != "" {
			t := a.Time.Add(d.backoff(dd.Delivery.AttemptCount + 1))
			if !t.After(dd.Delivery.CreatedAt.Add(d.cfg.RetryFor)) {
				state, outcome, next = api.DeliveryPending, "retry", &t
			}
		}
	}
	if d.obs != nil {
		d.obs.WebhookAttempt(outcome, time.Duration(a.LatencyMS)*time.Millisecond)
	}
	// The attempt happened: record it even if shutdown began meanwhile.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := d.st.RecordAttempt(rctx, dd.Delivery.ID, a, state, next); err != nil {
		if api.ErrorCode(err) == api.CodeNotFound {
			return // the webhook was deleted meanwhile, its deliveries with it
		}
		// Not recorded: the delivery stays due and is sent again.
		log.Error("record a webhook attempt", "outcome", outcome, "err", err)
		return
	}
	log.Debug("webhook attempt", "outcome", outcome, "status", a.StatusCode, "latency_ms", a.LatencyMS, "error", a.Error)
}

// backoff is the wait after the n-th failed attempt (n ≥ 1).
func (d *Dispatcher) backoff(n int) time.Duration {
	b := d.cfg.Backoff
	for i := 1; i < n && b < d.cfg.MaxBackoff; i++ {
		b *= 2
	}
	return min(b, d.cfg.MaxBackoff)
}
