package service

import (
	"context"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/internal/store/postgres"
	"github.com/cove-dev/cove/internal/store/sqlite"
	"github.com/cove-dev/cove/internal/testsupport/pgserver"
)

func TestMain(m *testing.M) { pgserver.Main(m) }

// bus is an in-memory LISTEN/NOTIFY: a notification reaches every
// listener, the sender's own included, as PostgreSQL's does.
type bus struct {
	mu        sync.Mutex
	listeners []func()
	sent      atomic.Int64
}

func (b *bus) Listen(ctx context.Context, channel string, fn func()) {
	if channel != changesChannel {
		panic("unexpected channel " + channel)
	}
	b.mu.Lock()
	b.listeners = append(b.listeners, fn)
	b.mu.Unlock()
	<-ctx.Done()
}

func (b *bus) Notify(ctx context.Context, channel string) error {
	b.sent.Add(1)
	b.mu.Lock()
	fns := append([]func(){}, b.listeners...)
	b.mu.Unlock()
	for _, fn := range fns {
		fn()
	}
	return nil
}

func (b *bus) count() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.listeners)
}

// testReplica is a replica over st whose lead records itself.
type testReplica struct {
	*replica
	wakes   atomic.Int64
	leading atomic.Int64 // leads running now
	stop    func()
}

func startReplica(t *testing.T, st store.Replicas, notes notifier) *testReplica {
	t.Helper()
	tr := &testReplica{}
	var wake func()
	if notes != nil {
		wake = func() { tr.wakes.Add(1) }
	}
	r, err := newReplica(st, 600*time.Millisecond, notes, wake, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	tr.replica = r
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	var wg sync.WaitGroup
	wg.Go(func() {
		r.run(ctx, func(ctx context.Context) {
			tr.leading.Add(1)
			<-ctx.Done()
			tr.leading.Add(-1)
		})
	})
	var once sync.Once
	tr.stop = func() { once.Do(func() { cancel(); wg.Wait() }) }
	t.Cleanup(tr.stop)
	return tr
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestReplicasOneLeader: two replicas over one store; exactly one runs
// the singletons, each sees the other alive, and when the leader stops
// the other leads, and sees it dead once it stopped beating.
func TestReplicasOneLeader(t *testing.T) {
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "cove.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	a := startReplica(t, st, nil)
	// A replica holds the lease (Leader) a moment before its lead runs.
	waitFor(t, "a leads", func() bool { return a.Leader() && a.leading.Load() > 0 })
	b := startReplica(t, st, nil)
	waitFor(t, "b beats", func() bool { alive, _ := a.Alive(t.Context(), b.id); return alive })
	if b.Leader() || b.leading.Load() != 0 || a.leading.Load() != 1 {
		t.Fatalf("leaders: a %v (%d leads), b %v (%d leads); want a alone", a.Leader(), a.leading.Load(), b.Leader(), b.leading.Load())
	}
	if alive, err := b.Alive(t.Context(), a.id); err != nil || !alive {
		t.Fatalf("b sees a alive = %v, %v; want true", alive, err)
	}
	if alive, _ := b.Alive(t.Context(), "rep_unknown"); alive {
		t.Error("a replica that never beat is alive")
	}
	if err := b.StoreHealth(t.Context()); err != nil {
		t.Errorf("store health = %v", err)
	}

	a.stop()
	if a.leading.Load() != 0 {
		t.Fatal("a's lead still runs after it stopped")
	}
	waitFor(t, "b leads", func() bool { return b.Leader() && b.leading.Load() > 0 })
	if b.leading.Load() != 1 {
		t.Errorf("b runs %d leads; want 1", b.leading.Load())
	}
	if b.lease.Term() != 2 {
		t.Errorf("b's term = %d; want 2", b.lease.Term())
	}
}

// TestReplicasCarryChanges: a change announced on one replica wakes the
// waiters of every replica on the bus; waiters are also woken by polling
// alone, for a notification lost.
func TestReplicasCarryChanges(t *testing.T) {
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "cove.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	b := &bus{}
	x, y := startReplica(t, st, b), startReplica(t, st, b)
	waitFor(t, "both listen", func() bool { return b.count() == 2 })
	before := y.wakes.Load()
	x.announce()
	waitFor(t, "y woken by x's change", func() bool { return y.wakes.Load() > before })
	if b.sent.Load() < 1 {
		t.Error("no notification was sent")
	}

	// Without notifications, polling wakes the waiters still.
	quiet := &bus{}
	z := startReplica(t, st, quiet)
	waitFor(t, "z polls", func() bool { return z.wakes.Load() >= 2 })
	if quiet.sent.Load() != 0 {
		t.Errorf("z sent %d notifications without a change", quiet.sent.Load())
	}
}

// countedNotes counts the notifications Listen delivers, apart from the
// polling's wakes.
type countedNotes struct {
	*postgres.DB
	heard atomic.Int64
}

func (c *countedNotes) Listen(ctx context.Context, channel string, fn func()) {
	c.DB.Listen(ctx, channel, func() {
		c.heard.Add(1)
		fn()
	})
}

// TestReplicasOnPostgres: two replicas on one PostgreSQL database: one
// leads, a change announced on one reaches the other through NOTIFY, and
// the other takes the lease when the leader stops.
func TestReplicasOnPostgres(t *testing.T) {
	url := pgserver.Start(t).NewDatabase(t)
	open := func() *postgres.DB {
		db, err := postgres.Open(t.Context(), url, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	}
	dbx, dby := open(), open()
	ny := &countedNotes{DB: dby}
	x := startReplica(t, dbx, dbx)
	waitFor(t, "x leads", x.Leader)
	y := startReplica(t, dby, ny)
	// Listen reports each time it starts listening: then y hears.
	waitFor(t, "y listens", func() bool { return ny.heard.Load() >= 1 })
	before := ny.heard.Load()
	x.announce()
	waitFor(t, "y hears x's change", func() bool { return ny.heard.Load() > before })
	if y.Leader() {
		t.Fatal("both replicas lead")
	}
	x.stop()
	waitFor(t, "y leads", y.Leader)
	if y.lease.Term() != 2 {
		t.Errorf("y's term = %d; want 2", y.lease.Term())
	}
}
