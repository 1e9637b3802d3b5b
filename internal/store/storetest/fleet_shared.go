package storetest

import (
	"fmt"
	"sync"
	"testing"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/store"
)

// fleetSharedTests are the cases of the fleet as several control replicas
// share it: heartbeats in the store and atomic admission of placements.
var fleetSharedTests = []struct {
	name string
	fn   func(*testing.T, store.Store)
}{
	{"NodeBeat", testNodeBeat},
	{"AdmitPlacement", testAdmitPlacement},
	{"AdmitPlacementConcurrent", testAdmitPlacementConcurrent},
}

func sharedNode(id, name string, state api.NodeState, epoch int64, cpus float64) store.Node {
	return store.Node{ID: id, Name: name, Addr: name + ":7443", State: state, Epoch: epoch,
		Capacity: api.NodeCapacity{CPUs: cpus, MemoryMiB: int64(cpus) * 1024}, CreatedAt: at(1)}
}

func testNodeBeat(t *testing.T, s store.Store) {
	ctx := t.Context()
	n := sharedNode("node_0001", "alpha", api.NodeReady, 3, 4)
	n.GPUNames, n.Templates, n.RegisteredAt, n.HeartbeatAt = []string{"gpu0"}, []string{"managed"}, ptr(at(2)), ptr(at(2))
	mustDo(t, s.CreateNode(ctx, n))
	got := mustGet[store.Node](t)(s.GetNode(ctx, n.ID))
	if got.HeartbeatAt == nil || !got.HeartbeatAt.Equal(at(2)) || len(got.GPUNames) != 1 || got.Templates[0] != "managed" {
		t.Fatalf("stored node = %+v", got)
	}

	beat := store.NodeBeat{ID: n.ID, Epoch: 3, At: at(9), Capacity: api.NodeCapacity{CPUs: 6, MemoryMiB: 6144, GPUs: 2},
		GPUNames: []string{"gpu0", "gpu1"}, Templates: []string{"managed", "python"}}
	mustDo(t, s.BeatNode(ctx, beat))
	want := n
	want.HeartbeatAt, want.Capacity, want.GPUNames, want.Templates = ptr(at(9).UTC()), beat.Capacity, beat.GPUNames, beat.Templates
	want.CreatedAt, want.RegisteredAt = want.CreatedAt.UTC(), ptr(at(2).UTC())
	diff(t, "node after a heartbeat", want, mustGet[store.Node](t)(s.GetNode(ctx, n.ID)))

	// A heartbeat of another epoch, or of a node that is not live, writes
	// nothing and answers conflict: the node registers again.
	stale := beat
	stale.Epoch, stale.At = 2, at(20)
	wantCode(t, s.BeatNode(ctx, stale), api.CodeConflict)
	for _, state := range []api.NodeState{api.NodeLost, api.NodeRemoved} {
		lost := want
		lost.State = state
		mustDo(t, s.UpdateNode(ctx, lost))
		later := beat
		later.At = at(30)
		wantCode(t, s.BeatNode(ctx, later), api.CodeConflict)
		if g := mustGet[store.Node](t)(s.GetNode(ctx, n.ID)); !g.HeartbeatAt.Equal(at(9)) {
			t.Fatalf("a %s node's heartbeat was recorded: %v", state, g.HeartbeatAt)
		}
	}
	draining := want
	draining.State = api.NodeDraining
	mustDo(t, s.UpdateNode(ctx, draining))
	mustDo(t, s.BeatNode(ctx, beat))
	wantCode(t, s.BeatNode(ctx, store.NodeBeat{ID: "node_none", Epoch: 1, At: at(1)}), api.CodeNotFound)
}

func testAdmitPlacement(t *testing.T, s store.Store) {
	ctx := t.Context()
	mustDo(t, s.CreateNode(ctx, sharedNode("node_0001", "alpha", api.NodeReady, 2, 4)))
	mustDo(t, s.CreateNode(ctx, sharedNode("node_0002", "beta", api.NodeDraining, 1, 4)))
	limit := api.Resources{CPUs: 4, MemoryMiB: 4096}
	place := func(sbx string, cpus float64, mem int64) store.Placement {
		return store.Placement{SandboxID: sbx, NodeID: "node_0001", Epoch: 2, Resources: api.Resources{CPUs: cpus, MemoryMiB: mem}}
	}
	mustDo(t, s.AdmitPlacement(ctx, place("sbx_0001", 1.5, 1024), limit))
	mustDo(t, s.AdmitPlacement(ctx, place("sbx_0002", 1.5, 1024), limit))
	// CPUs over the limit, then memory over it.
	wantCode(t, s.AdmitPlacement(ctx, place("sbx_0003", 1.5, 1024), limit), api.CodeResourceExhausted)
	wantCode(t, s.AdmitPlacement(ctx, place("sbx_0003", 0.5, 2049), limit), api.CodeResourceExhausted)
	// An exact fit is admitted; nothing is left after it.
	mustDo(t, s.AdmitPlacement(ctx, place("sbx_0003", 1, 2048), limit))
	wantCode(t, s.AdmitPlacement(ctx, place("sbx_0004", 0.1, 0), limit), api.CodeResourceExhausted)
	if _, err := s.GetPlacement(ctx, "sbx_0004"); api.ErrorCode(err) != api.CodeNotFound {
		t.Fatalf("a refused placement was stored: %v", err)
	}
	// A sandbox placed again on its node is not counted twice.
	mustDo(t, s.AdmitPlacement(ctx, place("sbx_0003", 1, 2048), limit))
	// A sandbox that went asleep (placed nowhere) frees its room.
	mustDo(t, s.PutPlacement(ctx, store.Placement{SandboxID: "sbx_0001", Save: "gen-1", SaveNodeID: "node_0001", SaveBytes: 1}))
	mustDo(t, s.AdmitPlacement(ctx, place("sbx_0004", 1.5, 1024), limit))
	diff(t, "stored placement", place("sbx_0004", 1.5, 1024), mustGet[store.Placement](t)(s.GetPlacement(ctx, "sbx_0004")))

	// A node that is not ready in the placement's epoch takes nothing.
	stale := place("sbx_0005", 0, 0)
	stale.Epoch = 1
	wantCode(t, s.AdmitPlacement(ctx, stale, limit), api.CodeConflict)
	draining := stale
	draining.NodeID = "node_0002"
	wantCode(t, s.AdmitPlacement(ctx, draining, limit), api.CodeConflict)
	missing := stale
	missing.NodeID = "node_none"
	wantCode(t, s.AdmitPlacement(ctx, missing, limit), api.CodeNotFound)
}

// testAdmitPlacementConcurrent: placements raced from many goroutines (as
// from several control replicas) never take a node past its limit.
func testAdmitPlacementConcurrent(t *testing.T, s store.Store) {
	ctx := t.Context()
	mustDo(t, s.CreateNode(ctx, sharedNode("node_0001", "alpha", api.NodeReady, 1, 8)))
	limit := api.Resources{CPUs: 8, MemoryMiB: 8192}
	const tries = 40
	var wg sync.WaitGroup
	errs := make([]error, tries)
	for i := range tries {
		wg.Go(func() {
			errs[i] = s.AdmitPlacement(ctx, store.Placement{SandboxID: fmt.Sprintf("sbx_%04d", i), NodeID: "node_0001", Epoch: 1,
				Resources: api.Resources{CPUs: 0.5, MemoryMiB: 512}}, limit)
		})
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
	ps := mustGet[[]store.Placement](t)(s.ListPlacements(ctx, "node_0001"))
	if admitted != 16 || len(ps) != 16 {
		t.Fatalf("admitted %d, stored %d placements on a node with room for 16", admitted, len(ps))
	}
}
