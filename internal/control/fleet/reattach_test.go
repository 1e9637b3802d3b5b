package fleet

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestReattachOnRegister: when a node registers again (its process may
// have started again), the core is asked to reattach every sandbox placed
// on it, again while the node does not answer yet; a first registration
// with nothing placed asks nothing.
func TestReattachOnRegister(t *testing.T) {
	h := newHarness(t, Config{LostAfter: 3 * time.Second})
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() { h.f.Run(ctx) })

	a := h.join(t, "a", 4)
	h.join(t, "b", 4)
	must(t, h.f.Admit(ctx, spec("sbx_1", 1)))
	must(t, h.f.Start(ctx, spec("sbx_1", 1)))
	must(t, h.f.Admit(ctx, spec("sbx_2", 1)))
	must(t, h.f.Start(ctx, spec("sbx_2", 1)))
	if got := h.lost.reattachedIDs(); len(got) != 0 {
		t.Fatalf("reattached before any node registered again: %v", got)
	}
	var onA []string
	for _, id := range []string{"sbx_1", "sbx_2"} {
		if h.placedOn(id) == "a" {
			onA = append(onA, id)
		}
	}
	if len(onA) == 0 {
		t.Fatal("nothing placed on a")
	}

	h.lost.mu.Lock()
	h.lost.unavailable = 3
	h.lost.mu.Unlock()
	if _, err := h.f.Register(ctx, a.NodeID, registration("a", 4)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(h.lost.reattachedIDs()) < len(onA) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if diff := cmp.Diff(onA, h.lost.reattachedIDs()); diff != "" {
		t.Fatalf("reattached after a registered again (-want +got):\n%s", diff)
	}
}
