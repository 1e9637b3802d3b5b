package lease_test

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/control/lease"
	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/internal/store/sqlite"
)

// fakeStore is a lease table on a fake clock the test moves.
type fakeStore struct {
	mu    sync.Mutex
	now   time.Time
	lease store.Lease
	fail  error
}

func (s *fakeStore) AcquireLease(ctx context.Context, name, holder string, ttl time.Duration) (store.Lease, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		return store.Lease{}, s.fail
	}
	if s.lease.Holder == holder || !s.now.Before(s.lease.ExpiresAt) {
		if s.lease.Holder != holder {
			s.lease.Term++
		}
		s.lease = store.Lease{Name: name, Holder: holder, Term: s.lease.Term, ExpiresAt: s.now.Add(ttl)}
	}
	return s.lease, nil
}

func (s *fakeStore) ReleaseLease(ctx context.Context, name, holder string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lease.Holder == holder {
		s.lease.ExpiresAt = s.now
	}
	return nil
}

func (s *fakeStore) advance(d time.Duration) {
	s.mu.Lock()
	s.now = s.now.Add(d)
	s.mu.Unlock()
}

func (s *fakeStore) setFail(err error) {
	s.mu.Lock()
	s.fail = err
	s.mu.Unlock()
}

// replica runs one lease whose renewals the test triggers (tick).
type replica struct {
	l    *lease.Lease
	tick chan time.Time

	mu    sync.Mutex
	leads []string // "start" and "stop" of each lead, in order
	waits int      // the waits for the next try: one per try decided
}

func (r *replica) tried() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.waits
}

func (r *replica) log() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.leads...)
}

func runReplica(t *testing.T, st lease.Store, holder string, ttl time.Duration, fakeTimer bool) (*replica, context.CancelFunc) {
	t.Helper()
	r := &replica{tick: make(chan time.Time)}
	cfg := lease.Config{Name: "leader", Holder: holder, TTL: ttl}
	if fakeTimer {
		cfg.After = func(time.Duration) <-chan time.Time {
			r.mu.Lock()
			r.waits++
			r.mu.Unlock()
			return r.tick
		}
	}
	l, err := lease.New(cfg, st, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	r.l = l
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	var wg sync.WaitGroup
	wg.Go(func() {
		l.Run(ctx, func(ctx context.Context) {
			r.mu.Lock()
			r.leads = append(r.leads, "start")
			r.mu.Unlock()
			<-ctx.Done()
			r.mu.Lock()
			r.leads = append(r.leads, "stop")
			r.mu.Unlock()
		})
	})
	stop := func() {
		cancel()
		wg.Wait()
	}
	t.Cleanup(stop)
	return r, stop
}

// eventually polls cond until it holds, failing the test after a deadline.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestTakeoverWhenHolderStopsRenewing: a replica leads while it holds the
// lease; the other waits. When the holder stops renewing (stalled), its
// lease runs out and the other takes it in the next term; the stalled one
// stops leading at its next renewal, which finds the lease taken.
func TestTakeoverWhenHolderStopsRenewing(t *testing.T) {
	st := &fakeStore{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	const ttl = 9 * time.Second
	a, _ := runReplica(t, st, "rep_a", ttl, true)
	eventually(t, "rep_a leads", a.l.Leader)
	b, _ := runReplica(t, st, "rep_b", ttl, true)
	eventually(t, "rep_b tried", func() bool { return b.tried() == 1 })
	if b.l.Leader() {
		t.Fatal("rep_b leads while rep_a holds the lease")
	}

	// rep_a renews within its TTL: rep_b still cannot take it.
	st.advance(ttl / 3)
	a.tick <- time.Time{}
	eventually(t, "rep_a renewed", func() bool { return a.tried() == 2 })
	st.advance(ttl - time.Second)
	b.tick <- time.Time{}
	eventually(t, "rep_b tried again", func() bool { return b.tried() == 2 })
	if b.l.Leader() || !a.l.Leader() {
		t.Fatal("rep_b took a lease rep_a renewed")
	}

	// rep_a stalls: no renewal. Its lease runs out and rep_b takes it.
	st.advance(time.Second)
	b.tick <- time.Time{}
	eventually(t, "rep_b leads", b.l.Leader)
	if b.l.Term() != 2 {
		t.Errorf("rep_b's term = %d; want 2", b.l.Term())
	}
	// rep_a resumes: its renewal finds rep_b's lease, and it stops.
	a.tick <- time.Time{}
	eventually(t, "rep_a stops leading", func() bool { return !a.l.Leader() })
	// Each lead's function runs on its own goroutine beside Leader: wait
	// for both logs to have caught up, then look at them whole.
	eventually(t, "both leads logged", func() bool { return len(a.log()) >= 2 && len(b.log()) >= 1 })
	if got := a.log(); len(got) != 2 || got[1] != "stop" {
		t.Errorf("rep_a's leads = %v; want one start and its stop", got)
	}
	if got := b.log(); len(got) != 1 || got[0] != "start" {
		t.Errorf("rep_b's leads = %v; want one start", got)
	}
}

// TestRenewalFailureStopsLead: a leader whose renewal fails (the store is
// unreachable) stops leading at once, and leads again once a renewal
// succeeds.
func TestRenewalFailureStopsLead(t *testing.T) {
	st := &fakeStore{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	a, _ := runReplica(t, st, "rep_a", 9*time.Second, true)
	eventually(t, "rep_a leads", a.l.Leader)
	st.setFail(errors.New("connection refused"))
	a.tick <- time.Time{}
	eventually(t, "rep_a stops leading", func() bool { return !a.l.Leader() })
	st.setFail(nil)
	a.tick <- time.Time{}
	eventually(t, "rep_a leads again", a.l.Leader)
	// The lead's function starts on its own goroutine once Leader says
	// so: wait for it to have started, then look at the whole log.
	eventually(t, "rep_a's lead runs again", func() bool { return len(a.log()) >= 3 })
	if got := a.log(); len(got) != 3 || got[0] != "start" || got[1] != "stop" || got[2] != "start" {
		t.Errorf("leads = %v; want start, stop, start", got)
	}
}

// TestHandOverOnStop: over a real store, a leader that stops releases the
// lease and the other replica takes it at its next try, well before the
// lease would have expired.
func TestHandOverOnStop(t *testing.T) {
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "cove.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	const ttl = time.Hour // a takeover by expiry would not come in time
	a, stopA := runReplica(t, st, "rep_a", ttl, true)
	eventually(t, "rep_a leads", a.l.Leader)
	b, _ := runReplica(t, st, "rep_b", ttl, true)
	stopA()
	if a.l.Leader() {
		t.Fatal("rep_a still leads after it stopped")
	}
	b.tick <- time.Time{}
	eventually(t, "rep_b leads", b.l.Leader)
	l, err := st.AcquireLease(t.Context(), "leader", "rep_c", ttl)
	if err != nil {
		t.Fatal(err)
	}
	if l.Holder != "rep_b" || l.Term != 2 {
		t.Errorf("lease = %+v; want rep_b's in term 2", l)
	}
}
