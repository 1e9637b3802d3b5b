package fleet

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/fleet/fleetwire"
	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/internal/store/postgres"
	"github.com/cove-dev/cove/internal/store/sqlite"
	"github.com/cove-dev/cove/internal/testsupport/pgserver"
)

// sharedStores are the real stores two control replicas can share, each
// opened fresh for a test.
func sharedStores(t *testing.T) map[string]func(t *testing.T) store.Fleet {
	return map[string]func(t *testing.T) store.Fleet{
		"sqlite": func(t *testing.T) store.Fleet {
			st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "cove.db"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			return st
		},
		// The two replicas share one pool here; fleetscale gives each
		// its own.
		"postgres": func(t *testing.T) store.Fleet {
			st, err := postgres.Open(t.Context(), pgserver.Start(t).NewDatabase(t), nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			return st
		},
	}
}

// replicas are two fleets over one store, as two control replicas, with
// the nodes of one harness (a node dialled by both is one fake).
func replicas(t *testing.T, st store.Fleet) (h *harness, a, b *Fleet) {
	t.Helper()
	h = newHarness(t, Config{Store: st})
	b, err := New(Config{Store: st, Dial: h.dial})
	must(t, err)
	b.SetSandboxes(h.lost)
	must(t, b.Load(t.Context()))
	return h, h.f, b
}

// TestReplicasShareTheFleet: a node that joined through one replica is
// dialled and used by the other; its heartbeats count through either;
// a drain or a removal on one is seen by the other.
func TestReplicasShareTheFleet(t *testing.T) {
	for name, open := range sharedStores(t) {
		t.Run(name, func(t *testing.T) {
			h, a, b := replicas(t, open(t))
			ctx := t.Context()
			n1, err := a.Register(ctx, "", registration("n1", 4))
			must(t, err)

			// b places on a node it has not refreshed for yet: the call
			// reads the placement and finds the node in the store.
			_, err = b.Register(ctx, "", registration("n1", 4))
			wantCode(t, err, api.CodeConflict) // the name is taken, through a
			must(t, b.Refresh(ctx))
			must(t, b.Admit(ctx, spec("sbx_1", 1)))
			must(t, b.Start(ctx, spec("sbx_1", 1)))
			if got := h.node("n1").Calls(); len(got) == 0 {
				t.Fatal("replica b's calls did not reach the node")
			}
			// a routes b's sandbox without a refresh.
			if _, id, _, err := a.route(ctx, "sbx_1", false); err != nil || id != n1.NodeID {
				t.Fatalf("a routes sbx_1 to %q, %v; want %s", id, err, n1.NodeID)
			}

			// The node heartbeats through b, in the epoch a gave it.
			_, err = b.Heartbeat(ctx, n1.NodeID, fleetwire.Heartbeat{Epoch: n1.Epoch, Templates: []string{"managed"},
				Capacity: fleetwire.Capacity{CPUs: 4, MemoryMiB: 4096}})
			must(t, err)
			row, err := h.f.store.GetNode(ctx, n1.NodeID)
			must(t, err)
			if row.HeartbeatAt == nil || row.HeartbeatAt.Before(*row.RegisteredAt) {
				t.Fatalf("heartbeat through b not recorded: %+v", row)
			}

			// Drained through a: b places nothing more there.
			_, err = a.Drain(ctx, "n1")
			must(t, err)
			must(t, b.Refresh(ctx))
			if n, _ := b.Node(ctx, "n1"); n.State != api.NodeDraining {
				t.Fatalf("b sees n1 %s; want draining", n.State)
			}
			wantCode(t, b.Admit(ctx, spec("sbx_2", 1)), api.CodeResourceExhausted)
			_, err = b.Undrain(ctx, "n1")
			must(t, err)
			must(t, a.Refresh(ctx))
			must(t, a.Admit(ctx, spec("sbx_2", 1)))

			// Removed through b: a refuses the node's calls, and a's view
			// no longer routes to it.
			must(t, b.Remove(ctx, "n1"))
			wantCode(t, a.Allowed(ctx, n1.NodeID), api.CodePermissionDenied)
			_, err = a.Heartbeat(ctx, n1.NodeID, fleetwire.Heartbeat{Epoch: n1.Epoch})
			wantCode(t, err, api.CodePermissionDenied)
			if _, _, _, err := a.route(ctx, "sbx_1", false); !isLost(err) {
				t.Fatalf("a routes a sandbox of a removed node: %v", err)
			}
		})
	}
}

// TestReplicasNeverOverfill: two replicas placing at once, each from a
// view that does not know the other's placements, never put a node over
// its capacity; a node that refuses is passed over for one with room.
func TestReplicasNeverOverfill(t *testing.T) {
	for name, open := range sharedStores(t) {
		t.Run(name, func(t *testing.T) {
			st := open(t)
			_, a, b := replicas(t, st)
			ctx := t.Context()
			for i := range 3 {
				_, err := a.Register(ctx, "", registration(fmt.Sprintf("n%d", i), 4))
				must(t, err)
			}
			must(t, b.Refresh(ctx))
			const tries = 40 // room for 12
			errs := make([]error, tries)
			var wg sync.WaitGroup
			for i := range tries {
				f := []*Fleet{a, b}[i%2]
				wg.Go(func() { errs[i] = f.Admit(ctx, spec(fmt.Sprintf("sbx_%02d", i), 1)) })
			}
			wg.Wait()
			admitted := 0
			for _, err := range errs {
				switch {
				case err == nil:
					admitted++
				case api.ErrorCode(err) != api.CodeResourceExhausted:
					t.Fatalf("admit: %v", err)
				}
			}
			ps, err := st.ListPlacements(ctx, "")
			must(t, err)
			perNode := map[string]float64{}
			for _, p := range ps {
				perNode[p.NodeID] += p.Resources.CPUs
			}
			if admitted != 12 || len(ps) != 12 {
				t.Fatalf("admitted %d, stored %d; want 12 (3 nodes of 4 CPUs)", admitted, len(ps))
			}
			for n, cpus := range perNode {
				if cpus > 4 {
					t.Fatalf("node %s holds %g CPUs of 4", n, cpus)
				}
			}
		})
	}
}

// TestBeatingFollowsTheNode: the replica a node heartbeats to is the one
// that tells its denials; after the node fails over, the other takes
// over within LostAfter.
func TestBeatingFollowsTheNode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config{LostAfter: 10 * time.Second}) // heartbeats every 2s
		ctx := t.Context()
		b, err := New(Config{Store: h.store, Dial: h.dial, LostAfter: 10 * time.Second})
		must(t, err)
		must(t, b.Load(ctx))
		a := h.f
		n, err := a.Register(ctx, "", registration("n1", 2))
		must(t, err)
		must(t, b.Refresh(ctx))
		if !a.Beating(n.NodeID) || b.Beating(n.NodeID) {
			t.Fatalf("after the join through a: a beating %v, b beating %v", a.Beating(n.NodeID), b.Beating(n.NodeID))
		}
		// The node fails over to b.
		for range 6 {
			time.Sleep(2 * time.Second)
			_, err := b.Heartbeat(ctx, n.NodeID, fleetwire.Heartbeat{Epoch: n.Epoch})
			must(t, err)
		}
		if a.Beating(n.NodeID) || !b.Beating(n.NodeID) {
			t.Fatalf("after the failover to b: a beating %v, b beating %v", a.Beating(n.NodeID), b.Beating(n.NodeID))
		}
	})
}

// staleNodes answers ListNodes with an older read while old is set: a
// refresh whose read began before a registration made meanwhile.
type staleNodes struct {
	*memStore
	old []store.Node
}

func (s *staleNodes) ListNodes(ctx context.Context) ([]store.Node, error) {
	if s.old != nil {
		return s.old, nil
	}
	return s.memStore.ListNodes(ctx)
}

// TestRefreshNeverGoesBack: a refresh that read the nodes before this
// replica registered one again keeps the new epoch, so the sandbox's
// calls and saves go on in it.
func TestRefreshNeverGoesBack(t *testing.T) {
	h := newHarness(t, Config{})
	ctx := t.Context()
	st := &staleNodes{memStore: h.store}
	f, err := New(Config{Store: st, Dial: h.dial})
	must(t, err)
	must(t, f.Load(ctx))
	a, err := f.Register(ctx, "", registration("a", 2))
	must(t, err)
	before, err := h.store.ListNodes(ctx)
	must(t, err)
	again, err := f.Register(ctx, a.NodeID, registration("a", 2))
	must(t, err)
	must(t, f.Admit(ctx, spec("sbx_1", 1)))
	must(t, f.Start(ctx, spec("sbx_1", 1)))

	st.old = before
	must(t, f.Refresh(ctx))
	st.old = nil
	if _, _, epoch, err := f.route(ctx, "sbx_1", false); err != nil || epoch != again.Epoch {
		t.Fatalf("after a stale refresh the node is in epoch %d (%v); want %d", epoch, err, again.Epoch)
	}
	if _, err := f.FinishSleep(ctx, "sbx_1"); err != nil {
		t.Fatalf("sleep after a stale refresh: %v", err)
	}
}
