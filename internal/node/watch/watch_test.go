package watch

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/node"
)

// fakeSource is an agent's watch fed by the test.
type fakeSource struct {
	ch     chan api.FileEvent
	once   sync.Once
	closed chan struct{}
}

func newSource() *fakeSource {
	return &fakeSource{ch: make(chan api.FileEvent), closed: make(chan struct{})}
}

func (s *fakeSource) Next() (api.FileEvent, error) {
	select {
	case ev, ok := <-s.ch:
		if !ok {
			return api.FileEvent{}, io.EOF
		}
		return ev, nil
	case <-s.closed:
		return api.FileEvent{}, errors.New("closed")
	}
}

func (s *fakeSource) Close() error { s.once.Do(func() { close(s.closed) }); return nil }

// send hands the journal an event; the journal has taken it when the next
// send (or sync) returns.
func (s *fakeSource) send(path string) { s.ch <- api.FileEvent{Type: api.FileWrite, Path: path} }

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

type rig struct {
	js      *Journals
	clock   *clock
	mu      sync.Mutex
	sources []*fakeSource
}

func newRig(t *testing.T, cfg Config) *rig {
	r := &rig{clock: &clock{t: time.Unix(1_800_000_000, 0)}}
	cfg.Now = r.clock.now
	r.js = New(cfg, func(ctx context.Context, sandboxID, path string, recursive bool) (Source, error) {
		if path == "/missing" {
			return nil, api.Errorf(api.CodeNotFound, "%s does not exist", path)
		}
		s := newSource()
		r.mu.Lock()
		r.sources = append(r.sources, s)
		r.mu.Unlock()
		return s, nil
	}, slog.New(slog.DiscardHandler))
	t.Cleanup(r.js.Close)
	return r
}

func (r *rig) source(i int) *fakeSource {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sources[i]
}

func (r *rig) watch(t *testing.T, after int64) node.FileWatch {
	t.Helper()
	w, err := r.js.Watch(t.Context(), "sbx_1", node.WatchSpec{Path: "/w", Recursive: true, After: after})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func next(t *testing.T, w node.FileWatch) api.FileEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	ev, err := w.Next(ctx)
	if err != nil {
		t.Fatalf("next: %v", err)
	}
	return ev
}

// settle waits until the journal has taken every event sent: its last
// sequence number is want.
func settle(t *testing.T, w node.FileWatch, want int64) {
	t.Helper()
	settleTo(t, w, want, 0)
}

// settleTo waits until the journal's last sequence number is want and it
// has counted pending events past its rate.
func settleTo(t *testing.T, w node.FileWatch, want, pending int64) {
	t.Helper()
	j := w.(*reader).j
	for range 1000 {
		j.mu.Lock()
		last, p := j.last, j.pending
		j.mu.Unlock()
		if last == want && p == pending {
			return
		}
		time.Sleep(time.Millisecond)
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	t.Fatalf("journal never reached %d: at %d (%d after the base), %d pending", want, j.last, j.last-j.base, j.pending)
}

// TestResumeWithoutLoss: a reader that leaves and comes back with after=
// gets every event it missed, in order, from the same journal.
func TestResumeWithoutLoss(t *testing.T) {
	r := newRig(t, Config{})
	w := r.watch(t, 0)
	src := r.source(0)
	src.send("/w/1")
	src.send("/w/2")
	first := next(t, w)
	if first.Path != "/w/1" {
		t.Fatalf("first event %+v", first)
	}
	w.Close()
	src.send("/w/3")
	src.send("/w/4")
	w2 := r.watch(t, first.Seq)
	defer w2.Close()
	for i, want := range []string{"/w/2", "/w/3", "/w/4"} {
		ev := next(t, w2)
		if ev.Path != want || ev.Seq != first.Seq+int64(i)+1 {
			t.Errorf("resumed event %d: %+v, want %s at %d", i, ev, want, first.Seq+int64(i)+1)
		}
	}
	if len(r.sources) != 1 {
		t.Errorf("%d agent watches, want the journal's one", len(r.sources))
	}
}

// TestPastTheBound: a reader resuming from before what the journal keeps
// gets one dropped record with the count it lost, then what is kept.
func TestPastTheBound(t *testing.T) {
	r := newRig(t, Config{Bound: 10})
	w := r.watch(t, 0)
	defer w.Close()
	base := w.(*reader).after
	src := r.source(0)
	for range 25 {
		src.send("/w/f")
	}
	settle(t, w, base+25)
	ev := next(t, w)
	if ev.Type != api.FileDropped || ev.Count != 15 || ev.Seq != base+15 {
		t.Fatalf("first record %+v, want dropped 15 at %d", ev, base+15)
	}
	for i := range 10 {
		if ev := next(t, w); ev.Type != api.FileWrite || ev.Seq != base+16+int64(i) {
			t.Fatalf("kept record %d: %+v", i, ev)
		}
	}
}

// TestRateBound: past Rate events in a second, events are counted and
// reported as one dropped record once the next second starts.
func TestRateBound(t *testing.T) {
	r := newRig(t, Config{Rate: 5})
	w := r.watch(t, 0)
	defer w.Close()
	base := w.(*reader).after
	src := r.source(0)
	for range 20 {
		src.send("/w/flood")
	}
	settleTo(t, w, base+5, 15)
	r.clock.add(time.Second)
	src.send("/w/after")
	settle(t, w, base+7)
	var got []api.FileEvent
	for range 7 {
		got = append(got, next(t, w))
	}
	for i := range 5 {
		if got[i].Type != api.FileWrite {
			t.Errorf("record %d: %+v", i, got[i])
		}
	}
	if got[5].Type != api.FileDropped || got[5].Count != 15 {
		t.Errorf("record 5: %+v, want dropped 15", got[5])
	}
	if got[6].Path != "/w/after" {
		t.Errorf("record 6: %+v", got[6])
	}
}

// TestKeepAndGone: a journal nobody reads stays Keep, then goes; a reader
// of the gone journal is told with a dropped record of count 0, and the
// new journal numbers past the old one.
func TestKeepAndGone(t *testing.T) {
	r := newRig(t, Config{})
	w := r.watch(t, 0)
	src := r.source(0)
	src.send("/w/1")
	ev := next(t, w)
	w.Close()
	src.send("/w/2")
	r.clock.add(9 * time.Minute)
	r.js.Sweep()
	w = r.watch(t, ev.Seq)
	if got := next(t, w); got.Path != "/w/2" {
		t.Fatalf("after 9 minutes: %+v", got)
	}
	w.Close()
	r.clock.add(10 * time.Minute)
	r.js.Sweep()
	select {
	case <-src.closed:
	default:
		t.Fatal("the agent's watch of a journal unread for 10 minutes is open")
	}
	w = r.watch(t, ev.Seq+1)
	defer w.Close()
	got := next(t, w)
	if got.Type != api.FileDropped || got.Count != 0 || got.Seq <= ev.Seq+1 {
		t.Fatalf("reader of a gone journal: %+v", got)
	}
	r.source(1).send("/w/3")
	if got := next(t, w); got.Path != "/w/3" {
		t.Fatalf("after the gone record: %+v", got)
	}
}

// TestEndAndErrors: a watch whose source ends reads to its end then EOF;
// an open error is the caller's; journals per sandbox are bounded.
func TestEndAndErrors(t *testing.T) {
	r := newRig(t, Config{MaxPerSandbox: 2})
	w := r.watch(t, 0)
	src := r.source(0)
	src.send("/w/1")
	close(src.ch)
	if ev := next(t, w); ev.Path != "/w/1" {
		t.Fatalf("%+v", ev)
	}
	if _, err := w.Next(t.Context()); err != io.EOF {
		t.Fatalf("after the end: %v", err)
	}
	w.Close()
	if _, err := r.js.Watch(t.Context(), "sbx_1", node.WatchSpec{Path: "/missing"}); api.ErrorCode(err) != api.CodeNotFound {
		t.Errorf("missing directory: %v", err)
	}
	a, err := r.js.Watch(t.Context(), "sbx_1", node.WatchSpec{Path: "/a"})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := r.js.Watch(t.Context(), "sbx_1", node.WatchSpec{Path: "/b"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := r.js.Watch(t.Context(), "sbx_1", node.WatchSpec{Path: "/c"}); api.ErrorCode(err) != api.CodeResourceExhausted {
		t.Errorf("third journal of a sandbox: %v", err)
	}
	if c, err := r.js.Watch(t.Context(), "sbx_2", node.WatchSpec{Path: "/c"}); err != nil {
		t.Errorf("another sandbox's journal: %v", err)
	} else {
		c.Close()
	}
}
