package storetest

import (
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/store"
)

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

func utcNode(n store.Node) store.Node {
	n.CreatedAt, n.RegisteredAt = n.CreatedAt.UTC(), utcPtr(n.RegisteredAt)
	return n
}

func testNodes(t *testing.T, s store.Store) {
	ctx := t.Context()
	n1 := store.Node{ID: "node_0001", Name: "alpha", Addr: "10.0.0.1:7443", State: api.NodeReady, Epoch: 1,
		Capacity:     api.NodeCapacity{CPUs: 8, MemoryMiB: 16384, DiskMiB: 100000, GPUs: 2, GPUType: "nvidia.com/gpu"},
		RegisteredAt: ptr(at(2)), CreatedAt: at(1)}
	n2 := store.Node{ID: "node_0002", Name: "beta", Addr: "10.0.0.2:7443", State: api.NodeDraining, CreatedAt: at(3)}
	mustDo(t, s.CreateNode(ctx, n1))
	mustDo(t, s.CreateNode(ctx, n2))
	wantCode(t, s.CreateNode(ctx, n1), api.CodeConflict)
	dup := n2
	dup.ID = "node_0003"
	wantCode(t, s.CreateNode(ctx, dup), api.CodeConflict) // name of a live node

	diff(t, "GetNode", utcNode(n1), mustGet[store.Node](t)(s.GetNode(ctx, "node_0001")))
	_, err := s.GetNode(ctx, "node_none")
	wantCode(t, err, api.CodeNotFound)

	n1.Epoch, n1.State, n1.Addr, n1.RegisteredAt = 2, api.NodeLost, "10.0.0.9:7443", ptr(at(5))
	mustDo(t, s.UpdateNode(ctx, n1))
	diff(t, "GetNode after update", utcNode(n1), mustGet[store.Node](t)(s.GetNode(ctx, "node_0001")))
	rename := n1
	rename.Name = "beta"
	wantCode(t, s.UpdateNode(ctx, rename), api.CodeConflict)
	missing := n1
	missing.ID, missing.Name = "node_none", "gamma"
	wantCode(t, s.UpdateNode(ctx, missing), api.CodeNotFound)

	// A removed node's name is free again.
	n2.State = api.NodeRemoved
	mustDo(t, s.UpdateNode(ctx, n2))
	mustDo(t, s.CreateNode(ctx, dup))
	diff(t, "ListNodes", []store.Node{utcNode(n1), utcNode(n2), utcNode(dup)},
		mustGet[[]store.Node](t)(s.ListNodes(ctx)))
}

// testNodeJoinHash: the hash of a node's join nonce is kept with its row
// through every write until the node's first heartbeat spends it, and the
// name stays one live node's whatever hash a second row brings: the
// registry answers a join that brings the same nonce again from the one
// row, never from a second.
func testNodeJoinHash(t *testing.T, s store.Store) {
	ctx := t.Context()
	const h1, h2 = "1111111111111111111111111111111111111111111111111111111111111111",
		"2222222222222222222222222222222222222222222222222222222222222222"
	n := store.Node{ID: "node_j1", Name: "joiner", Addr: "10.0.0.1:7443", State: api.NodeReady, Epoch: 1,
		CreatedAt: at(1), JoinHash: h1}
	mustDo(t, s.CreateNode(ctx, n))
	if got := mustGet[store.Node](t)(s.GetNode(ctx, n.ID)); got.JoinHash != h1 {
		t.Fatalf("GetNode: join hash %q, want %q", got.JoinHash, h1)
	}
	// A second row of the name is refused, with the same hash as with
	// another one: exactly one row per live name.
	for _, h := range []string{h1, h2, ""} {
		twin := n
		twin.ID, twin.JoinHash = "node_j2", h
		wantCode(t, s.CreateNode(ctx, twin), api.CodeConflict)
	}
	// A registration again keeps the hash (UpdateNode writes it back).
	n.Epoch, n.RegisteredAt = 2, ptr(at(2))
	mustDo(t, s.UpdateNode(ctx, n))
	nodes := mustGet[[]store.Node](t)(s.ListNodes(ctx))
	var same []store.Node
	for _, o := range nodes {
		if o.Name == "joiner" {
			same = append(same, o)
		}
	}
	if len(same) != 1 || same[0].JoinHash != h1 || same[0].Epoch != 2 {
		t.Fatalf("ListNodes: nodes named joiner %+v; want one, hash %s, epoch 2", same, h1)
	}
	// A heartbeat of another epoch spends nothing; one of the node's
	// epoch spends the hash in the same write: the node was heard with
	// its certificate.
	wantCode(t, s.BeatNode(ctx, store.NodeBeat{ID: n.ID, Epoch: 1, At: at(3)}), api.CodeConflict)
	if got := mustGet[store.Node](t)(s.GetNode(ctx, n.ID)); got.JoinHash != h1 {
		t.Fatalf("a refused heartbeat spent the join hash: %q", got.JoinHash)
	}
	mustDo(t, s.BeatNode(ctx, store.NodeBeat{ID: n.ID, Epoch: 2, At: at(3)}))
	if got := mustGet[store.Node](t)(s.GetNode(ctx, n.ID)); got.JoinHash != "" || got.Epoch != 2 || got.Name != "joiner" {
		t.Fatalf("after a heartbeat: %+v; want the join hash spent, the rest kept", got)
	}

	// A node that joined without a nonce has none.
	old := store.Node{ID: "node_j3", Name: "older", State: api.NodeReady, CreatedAt: at(3)}
	mustDo(t, s.CreateNode(ctx, old))
	if got := mustGet[store.Node](t)(s.GetNode(ctx, old.ID)); got.JoinHash != "" {
		t.Fatalf("a node without a nonce reads back hash %q", got.JoinHash)
	}
}

func testPlacements(t *testing.T, s store.Store) {
	ctx := t.Context()
	_, err := s.GetPlacement(ctx, "sbx_1")
	wantCode(t, err, api.CodeNotFound)
	p1 := store.Placement{SandboxID: "sbx_1", NodeID: "node_a", Epoch: 3, Resources: api.Resources{CPUs: 0.5, MemoryMiB: 512, DiskMiB: 1024}}
	p2 := store.Placement{SandboxID: "sbx_2", NodeID: "node_b", Epoch: 1,
		Save: "1-100", SaveNodeID: "node_b", SaveBytes: 4096, SavedAt: ptr(at(4))}
	p3 := store.Placement{SandboxID: "sbx_3", Save: "2-200", SaveNodeID: "node_a", SaveBytes: 1, SavedAt: ptr(at(6))}
	for _, p := range []store.Placement{p1, p2, p3} {
		mustDo(t, s.PutPlacement(ctx, p))
	}
	utc := func(p store.Placement) store.Placement { p.SavedAt = utcPtr(p.SavedAt); return p }
	diff(t, "GetPlacement", utc(p2), mustGet[store.Placement](t)(s.GetPlacement(ctx, "sbx_2")))
	p1.Epoch, p1.Save, p1.SaveNodeID, p1.SaveBytes, p1.SavedAt = 4, "4-1", "node_a", 10, ptr(at(7))
	mustDo(t, s.PutPlacement(ctx, p1))
	diff(t, "GetPlacement replaced", utc(p1), mustGet[store.Placement](t)(s.GetPlacement(ctx, "sbx_1")))
	diff(t, "ListPlacements node_a", []store.Placement{utc(p1)},
		mustGet[[]store.Placement](t)(s.ListPlacements(ctx, "node_a")))
	diff(t, "ListPlacements all", []store.Placement{utc(p1), utc(p2), utc(p3)},
		mustGet[[]store.Placement](t)(s.ListPlacements(ctx, "")))
	mustDo(t, s.DeletePlacement(ctx, "sbx_1"))
	mustDo(t, s.DeletePlacement(ctx, "sbx_1"))
	_, err = s.GetPlacement(ctx, "sbx_1")
	wantCode(t, err, api.CodeNotFound)
}

func testFleetValues(t *testing.T, s store.Store) {
	ctx := t.Context()
	_, err := s.FleetValue(ctx, "ca")
	wantCode(t, err, api.CodeNotFound)
	mustDo(t, s.PutFleetValue(ctx, "ca", "one"))
	mustDo(t, s.PutFleetValue(ctx, "token", "t"))
	mustDo(t, s.PutFleetValue(ctx, "ca", "two"))
	diff(t, "FleetValue", "two", mustGet[string](t)(s.FleetValue(ctx, "ca")))
	diff(t, "FleetValue token", "t", mustGet[string](t)(s.FleetValue(ctx, "token")))
	// Create writes only where nothing is: the first of two replicas wins.
	mustDo(t, s.CreateFleetValue(ctx, "first", "a"))
	wantCode(t, s.CreateFleetValue(ctx, "first", "b"), api.CodeConflict)
	diff(t, "CreateFleetValue", "a", mustGet[string](t)(s.FleetValue(ctx, "first")))
}
