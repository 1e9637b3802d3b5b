package fleet

import (
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/node"
)

// TestRestartKeepsReservations: a new control plane over the same store
// counts the placements it finds, so a full node stays full.
func TestRestartKeepsReservations(t *testing.T) {
	h := newHarness(t, Config{})
	ctx := t.Context()
	a := h.join(t, "a", 2)
	must(t, h.f.Admit(ctx, spec("sbx_1", 2)))
	must(t, h.f.Start(ctx, spec("sbx_1", 2)))
	restarted, err := New(Config{Store: h.store, Dial: h.dial})
	must(t, err)
	must(t, restarted.Load(ctx))
	h.f = restarted
	back, err := restarted.Register(ctx, a.NodeID, registration("a", 2))
	must(t, err)
	if len(back.Assigned) != 1 || back.Assigned[0] != "sbx_1" {
		t.Fatalf("assigned after restart = %v; want [sbx_1]", back.Assigned)
	}
	wantCode(t, restarted.Admit(ctx, spec("sbx_2", 1)), api.CodeResourceExhausted)
	must(t, restarted.Destroy(ctx, "sbx_1"))
	must(t, restarted.Admit(ctx, spec("sbx_2", 1)))
}

// TestCallsGoToTheSandboxNode: each call reaches the node that holds the
// sandbox and no other; a sandbox placed nowhere is not found.
func TestCallsGoToTheSandboxNode(t *testing.T) {
	h := newHarness(t, Config{})
	ctx := t.Context()
	h.join(t, "a", 2)
	must(t, h.f.Admit(ctx, spec("sbx_1", 2))) // a is full now
	must(t, h.f.Start(ctx, spec("sbx_1", 2)))
	h.join(t, "b", 2)
	must(t, h.f.Admit(ctx, spec("sbx_2", 2)))
	must(t, h.f.Start(ctx, spec("sbx_2", 2)))
	if h.placedOn("sbx_2") != "b" {
		t.Fatalf("sbx_2 on %q", h.placedOn("sbx_2"))
	}
	h.node("a").SetStats("sbx_1", node.Stats{CPUNanos: 1})
	h.node("b").SetStats("sbx_2", node.Stats{CPUNanos: 2})
	st := h.f.Stats(ctx, []string{"sbx_1", "sbx_2", "sbx_none"})
	if len(st) != 2 || st["sbx_1"].CPUNanos != 1 || st["sbx_2"].CPUNanos != 2 {
		t.Fatalf("stats = %+v", st)
	}
	must(t, h.f.SetHostname(ctx, "sbx_2", "web"))
	if sb, _ := h.node("b").Sandbox("sbx_2"); sb.Hostname != "web" {
		t.Fatalf("hostname on b = %q", sb.Hostname)
	}
	if _, ok := h.node("a").Sandbox("sbx_2"); ok {
		t.Fatal("node a holds sbx_2")
	}
	wantCode(t, h.f.SetHostname(ctx, "sbx_none", "x"), api.CodeNotFound)
	known, err := h.f.Known(ctx)
	must(t, err)
	if len(known) != 2 {
		t.Fatalf("known = %v", known)
	}
}

// TestGPUPlacement: a sandbox given GPU devices goes only to the node that
// has them; GPUs reports the node with the most.
func TestGPUPlacement(t *testing.T) {
	h := newHarness(t, Config{})
	ctx := t.Context()
	h.join(t, "cpu", 16)
	r := registration("gpu", 2)
	r.Capacity.GPUs = node.GPUs{Type: "nvidia.com/gpu", Names: []string{"nvidia.com/gpu=0", "nvidia.com/gpu=1"}}
	_, err := h.f.Register(ctx, "", r)
	must(t, err)
	if g := h.f.GPUs(); len(g.Names) != 2 {
		t.Fatalf("GPUs = %+v", g)
	}
	s := spec("sbx_1", 1)
	s.Devices = []string{"nvidia.com/gpu=1"}
	must(t, h.f.Admit(ctx, s))
	if got := h.placedOn("sbx_1"); got != "gpu" {
		t.Fatalf("GPU sandbox on %q", got)
	}
	s = spec("sbx_2", 1)
	s.Devices = []string{"nvidia.com/gpu=7"}
	wantCode(t, h.f.Admit(ctx, s), api.CodeResourceExhausted)
}

// TestDestroyOnLostNode: a sandbox of a lost node is destroyed without an
// error and its placement forgotten.
func TestDestroyOnLostNode(t *testing.T) {
	h := newHarness(t, Config{})
	ctx := t.Context()
	a := h.join(t, "a", 2)
	must(t, h.f.Admit(ctx, spec("sbx_1", 1)))
	must(t, h.f.retire(ctx, a.NodeID, api.NodeLost, "was lost", time.Time{}))
	must(t, h.f.Destroy(ctx, "sbx_1"))
	if _, err := h.store.GetPlacement(ctx, "sbx_1"); api.ErrorCode(err) != api.CodeNotFound {
		t.Fatalf("placement after destroy: %v", err)
	}
}

// TestSaveCalls: a copy of a save is made on the node that wrote it and
// recorded for its new name; DropSave forgets the recorded generation, so
// a later wake asks for none.
func TestSaveCalls(t *testing.T) {
	h := newHarness(t, Config{})
	ctx := t.Context()
	a := h.join(t, "a", 2)
	h.runAndSleep(t, "sbx_1", 1)
	h.join(t, "b", 8)
	if _, err := h.f.CopySave(ctx, "sbx_1", "cache_1"); err != nil {
		t.Fatal(err)
	}
	if calls := h.node("b").Calls(); len(calls) != 0 {
		t.Fatalf("node b was asked %v; the save is a's", calls)
	}
	p, err := h.store.GetPlacement(ctx, "cache_1")
	must(t, err)
	if p.SaveNodeID != a.NodeID || p.NodeID != "" {
		t.Fatalf("copy recorded as %+v", p)
	}
	must(t, h.f.DropSave(ctx, "sbx_1"))
	p, err = h.store.GetPlacement(ctx, "sbx_1")
	must(t, err)
	if p.Save != "" || p.SaveNodeID != "" {
		t.Fatalf("save still recorded after DropSave: %+v", p)
	}
}
