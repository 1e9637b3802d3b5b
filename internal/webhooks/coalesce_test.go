package webhooks

import (
	"context"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/internal/store/sqlite"
)

// countingStore counts the outbox reads of the store it wraps.
type countingStore struct {
	*sqlite.DB
	reads atomic.Int64
}

func (c *countingStore) DueDeliveries(ctx context.Context, t time.Time, perTeam int) ([]store.DueDelivery, error) {
	c.reads.Add(1)
	return c.DB.DueDeliveries(ctx, t, perTeam)
}

// changes is a server's Changes: a channel closed at the next Notify.
type changes struct {
	mu sync.Mutex
	ch chan struct{}
}

func (c *changes) wait() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ch == nil {
		c.ch = make(chan struct{})
	}
	return c.ch
}

func (c *changes) notify() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ch != nil {
		close(c.ch)
		c.ch = nil
	}
}

// TestChangesCoalesce: a burst of changes right after a read of the
// outbox waits for Coalesce, with no read meanwhile, and is then served
// by one read; with Coalesce 0 each change reads at once.
func TestChangesCoalesce(t *testing.T) {
	for _, tt := range []struct {
		name     string
		coalesce time.Duration
	}{{"coalesced", time.Hour}, {"each change", 0}} {
		t.Run(tt.name, func(t *testing.T) {
			db, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "cove.db"))
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			st := &countingStore{DB: db}
			cfg := testConfig()
			cfg.Poll, cfg.Coalesce = time.Hour, tt.coalesce
			ch := &changes{}
			d, err := New(cfg, st, ch.wait, nil, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			coalescing := make(chan struct{})
			d.coalescing = coalescing
			ctx, cancel := context.WithCancel(context.Background())
			ran := make(chan struct{})
			go func() {
				defer close(ran)
				d.Run(ctx)
			}()
			defer func() { cancel(); <-ran }()
			waitReads := func(n int64) {
				t.Helper()
				for deadline := time.Now().Add(30 * time.Second); st.reads.Load() < n; time.Sleep(time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatalf("%d reads of the outbox, want %d", st.reads.Load(), n)
					}
				}
			}
			waitReads(1) // the first, at start
			if tt.coalesce == 0 {
				for i := int64(2); i < 12; i++ {
					ch.notify()
					waitReads(i)
				}
				return
			}
			ch.notify()
			select { // the change waits rather than reads
			case <-coalescing:
			case <-time.After(30 * time.Second):
				t.Fatalf("a change did not wait for Coalesce (%d reads)", st.reads.Load())
			}
			for range 10 {
				ch.notify() // nobody waits on it: nothing is read
			}
			if n := st.reads.Load(); n != 1 {
				t.Fatalf("%d reads while the burst waits, want 1", n)
			}
		})
	}
}
