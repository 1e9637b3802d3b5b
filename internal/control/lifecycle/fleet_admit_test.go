package lifecycle_test

import (
	"testing"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/fleet"
	"github.com/cove-dev/cove/internal/fleet/fleetwire"
	"github.com/cove-dev/cove/internal/node/nodetest"
)

// TestRefusedCreateGivesBackItsPlacement: a create refused after the
// fleet placed the sandbox (its name is taken) leaves no placement behind,
// so the node's room is not lost to sandboxes that never were.
func TestRefusedCreateGivesBackItsPlacement(t *testing.T) {
	h := newHarness(t)
	ctx := t.Context()
	nd := nodetest.New()
	nd.OnExit = h.srv.OnExit
	t.Cleanup(nd.Close)
	f, err := fleet.New(fleet.Config{Store: h.st,
		Dial: func(nodeID, addr string) (fleet.NodeClient, error) { return nd, nil }})
	if err != nil {
		t.Fatal(err)
	}
	f.SetSandboxes(h.srv)
	if err := f.Load(ctx); err != nil {
		t.Fatal(err)
	}
	a, err := f.Register(ctx, "", fleetwire.Registration{Name: "a", Addr: "a:1",
		Capacity: fleetwire.Capacity{CPUs: 8, MemoryMiB: 16384}, Templates: []string{"managed"}})
	if err != nil {
		t.Fatal(err)
	}
	h.plane.SetNode(f)

	h.running(t, h.a, "taken")
	for range 3 {
		if _, err := h.srv.CreateSandbox(ctx, h.a, api.CreateSandboxRequest{Name: "taken"}); api.ErrorCode(err) != api.CodeConflict {
			t.Fatalf("a second sandbox named taken: %v", err)
		}
	}
	ps, err := h.st.ListPlacements(ctx, a.NodeID)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 1 {
		t.Fatalf("%d placements on the node after refused creates; want the one sandbox's: %+v", len(ps), ps)
	}
}
