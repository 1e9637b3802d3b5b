package fleet

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/fleet/fleetwire"
)

// sleep runs a sandbox on its node and puts it to sleep there, recording
// its save.
func (h *harness) runAndSleep(t *testing.T, id string, cpus float64) {
	t.Helper()
	ctx := t.Context()
	must(t, h.f.Admit(ctx, spec(id, cpus)))
	must(t, h.f.Start(ctx, spec(id, cpus)))
	if _, err := h.f.FinishSleep(ctx, id); err != nil {
		t.Fatal(err)
	}
}

// TestWake: a wake goes to the node the sandbox slept on when it has room
// and is ready, else to another, and restores the recorded generation.
func TestWake(t *testing.T) {
	tests := []struct {
		name  string
		after func(t *testing.T, h *harness)
		want  string
	}{
		{"home", func(t *testing.T, h *harness) {}, "a"},
		{"home full", func(t *testing.T, h *harness) {
			must(t, h.f.Admit(t.Context(), spec("sbx_big", 2)))
		}, "b"},
		{"home draining", func(t *testing.T, h *harness) {
			_, err := h.f.Drain(t.Context(), "a")
			must(t, err)
		}, "b"},
		{"home lost", func(t *testing.T, h *harness) {
			must(t, h.f.retire(t.Context(), h.nodeID(t, "a"), api.NodeLost, "was lost", time.Time{}))
		}, "b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, Config{})
			h.join(t, "a", 2)
			h.runAndSleep(t, "sbx_1", 1)
			tt.after(t, h)
			h.join(t, "b", 4) // more room than a: a wins only as the home
			must(t, h.f.Wake(t.Context(), spec("sbx_1", 1)))
			if got := h.placedOn("sbx_1"); got != tt.want {
				t.Fatalf("woken on %q; want %q", got, tt.want)
			}
			w := h.node(tt.want).woken()
			if len(w) != 1 || w[0].Save != "a-1" {
				t.Fatalf("wakes on %s = %+v; want one from save a-1", tt.want, w)
			}
		})
	}
}

func (h *harness) nodeID(t *testing.T, name string) string {
	t.Helper()
	n, err := h.f.Node(t.Context(), name)
	must(t, err)
	return n.ID
}

// TestStaleEpochSaveNotRecorded: a save finished by a node that
// registered again (new epoch) or was lost meanwhile is not recorded; the
// earlier one stays the recovery point.
func TestStaleEpochSaveNotRecorded(t *testing.T) {
	for _, how := range []string{"registered again", "lost"} {
		t.Run(how, func(t *testing.T) {
			h := newHarness(t, Config{})
			a := h.join(t, "a", 2)
			ctx := t.Context()
			h.runAndSleep(t, "sbx_1", 1) // save a-1
			must(t, h.f.Wake(ctx, spec("sbx_1", 1)))
			// The second sleep's call goes out in this epoch; the node's
			// epoch changes while it runs.
			_, _, epoch, err := h.f.route(ctx, "sbx_1", false)
			must(t, err)
			switch how {
			case "registered again":
				_, err = h.f.Register(ctx, a.NodeID, registration("a", 2))
			case "lost":
				err = h.f.retire(ctx, a.NodeID, api.NodeLost, "was lost", time.Time{})
			}
			must(t, err)
			// The call went out in the old epoch.
			info, err := h.node("a").FinishSleep(ctx, "sbx_1")
			must(t, err)
			err = h.f.recordSave(ctx, "sbx_1", a.NodeID, epoch, info)
			if err == nil {
				t.Fatal("a save of a stale epoch was recorded")
			}
			h.f.mu.Lock()
			p := *h.f.placed["sbx_1"]
			h.f.mu.Unlock()
			if p.Save != "a-1" {
				t.Fatalf("recorded save = %q; want the earlier a-1", p.Save)
			}
		})
	}
}

// TestRegistry: epochs grow at every registration; a second join of a
// registered name is refused; heartbeats with a stale epoch, of a lost or
// of a removed node are refused with the codes the node acts on.
func TestRegistry(t *testing.T) {
	h := newHarness(t, Config{})
	ctx := t.Context()
	a := h.join(t, "a", 2)
	if a.Epoch != 1 || !strings.HasPrefix(a.NodeID, "node_") || a.HeartbeatMS != 3000 {
		t.Fatalf("admission = %+v", a)
	}
	_, err := h.f.Register(ctx, "", registration("a", 2))
	wantCode(t, err, api.CodeConflict)
	must(t, h.f.Admit(ctx, spec("sbx_1", 1)))
	again, err := h.f.Register(ctx, a.NodeID, registration("a", 2))
	must(t, err)
	if again.Epoch != 2 || !cmp.Equal(again.Assigned, []string{"sbx_1"}) {
		t.Fatalf("admission again = %+v; want epoch 2 assigned [sbx_1]", again)
	}
	_, err = h.f.Heartbeat(ctx, a.NodeID, fleetwire.Heartbeat{Epoch: 1})
	wantCode(t, err, api.CodeConflict)
	_, err = h.f.Heartbeat(ctx, a.NodeID, fleetwire.Heartbeat{Epoch: 2})
	must(t, err)
	_, err = h.f.Heartbeat(ctx, "node_unknown", fleetwire.Heartbeat{Epoch: 1})
	wantCode(t, err, api.CodePermissionDenied)

	must(t, h.f.retire(ctx, a.NodeID, api.NodeLost, "was lost", time.Time{}))
	_, err = h.f.Heartbeat(ctx, a.NodeID, fleetwire.Heartbeat{Epoch: 2})
	wantCode(t, err, api.CodeConflict)
	back, err := h.f.Register(ctx, a.NodeID, registration("a", 2))
	must(t, err)
	if back.Epoch != 3 || len(back.Assigned) != 0 {
		t.Fatalf("admission after loss = %+v; want epoch 3, nothing assigned", back)
	}

	must(t, h.f.Allowed(ctx, a.NodeID))
	must(t, h.f.Admit(ctx, spec("sbx_2", 1)))
	must(t, h.f.Remove(ctx, "a"))
	if got := h.lost.got(); len(got) != 2 || got[1].Sandbox != "sbx_2" || !strings.HasPrefix(got[1].Reason, "node_lost: node a was removed") {
		t.Fatalf("NodeLost calls after removal = %+v", got)
	}
	wantCode(t, h.f.Allowed(ctx, a.NodeID), api.CodePermissionDenied)
	_, err = h.f.Heartbeat(ctx, a.NodeID, fleetwire.Heartbeat{Epoch: 3})
	wantCode(t, err, api.CodePermissionDenied)
	_, err = h.f.Register(ctx, a.NodeID, registration("a", 2))
	wantCode(t, err, api.CodePermissionDenied)
	// The name is free again, for a new identity.
	fresh := h.join(t, "a", 2)
	if fresh.NodeID == a.NodeID {
		t.Fatal("a removed node's identity came back")
	}
}

// TestLoss: a node silent for LostAfter is lost; each of its sandboxes is
// settled through the core, asleep from its save or failed; a node that
// keeps sending heartbeats is not.
func TestLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config{LostAfter: 10 * time.Second})
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		a := h.join(t, "a", 4)
		must(t, h.f.Admit(ctx, spec("sbx_1", 1))) // on a
		must(t, h.f.Start(ctx, spec("sbx_1", 1)))
		h.runAndSleep(t, "sbx_2", 1) // on a, saved
		must(t, h.f.Wake(ctx, spec("sbx_2", 1)))
		b := h.join(t, "b", 4)
		must(t, h.f.Admit(ctx, spec("sbx_3", 1))) // on b (most room now)
		if h.placedOn("sbx_3") != "b" {
			t.Fatalf("sbx_3 on %q", h.placedOn("sbx_3"))
		}
		done := make(chan error, 1)
		go func() { done <- h.f.RunLossDetection(ctx) }()
		for range 4 { // b keeps beating, a is silent
			time.Sleep(3 * time.Second)
			_, err := h.f.Heartbeat(ctx, b.NodeID, fleetwire.Heartbeat{Epoch: b.Epoch})
			must(t, err)
		}
		synctest.Wait()
		got := h.lost.got()
		if len(got) != 2 || got[0].Sandbox != "sbx_1" || got[0].Saved || !strings.HasPrefix(got[0].Reason, "node_lost: node a was lost") ||
			got[1].Sandbox != "sbx_2" || !got[1].Saved || !strings.Contains(got[1].Reason, "node a was lost; it wakes from its save of") ||
			!strings.Contains(got[1].Reason, "(4096 bytes)") {
			t.Fatalf("NodeLost calls = %+v", got)
		}
		n, err := h.f.Node(ctx, a.NodeID)
		must(t, err)
		if n.State != api.NodeLost || n.Sandboxes != 0 || n.Reserved.CPUs != 0 {
			t.Fatalf("lost node = %+v", n)
		}
		if nb, _ := h.f.Node(ctx, "b"); nb.State != api.NodeReady {
			t.Fatalf("node b = %+v; want ready", nb)
		}
		_, err = h.f.Heartbeat(ctx, a.NodeID, fleetwire.Heartbeat{Epoch: a.Epoch})
		wantCode(t, err, api.CodeConflict)
		cancel()
		must(t, <-done)
	})
}

// TestRestartWaitsForNodes: a control plane started over the store of
// another (a restart, or a second replica) dials the nodes from the store;
// calls for a sandbox wait for its node to be heard of again (a heartbeat,
// through any replica, without registering again) up to LostAfter; past
// that they answer node-lost, and loss detection settles the sandbox.
func TestRestartWaitsForNodes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config{LostAfter: 10 * time.Second})
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		a := h.join(t, "a", 4)
		h.join(t, "b", 4)
		must(t, h.f.Admit(ctx, spec("sbx_1", 1)))
		must(t, h.f.Start(ctx, spec("sbx_1", 1)))
		must(t, h.f.Admit(ctx, spec("sbx_2", 1)))
		must(t, h.f.Start(ctx, spec("sbx_2", 1)))
		onA := "sbx_1"
		if h.placedOn("sbx_1") != "a" {
			onA = "sbx_2"
		}
		onB := map[string]string{"sbx_1": "sbx_2", "sbx_2": "sbx_1"}[onA]

		// A new control plane over the same store, later.
		time.Sleep(time.Minute)
		restarted, err := New(Config{Store: h.store, Dial: h.dial, LostAfter: 10 * time.Second})
		must(t, err)
		restarted.SetSandboxes(h.lost)
		must(t, restarted.Load(ctx))
		h.f = restarted

		attached := make(chan error, 1)
		go func() { attached <- restarted.Attach(ctx, spec(onA, 1), nil) }()
		time.Sleep(4 * time.Second)
		synctest.Wait()
		select {
		case err := <-attached:
			t.Fatalf("attach returned before its node was heard of: %v", err)
		default:
		}
		_, err = restarted.Heartbeat(ctx, a.NodeID, fleetwire.Heartbeat{Epoch: a.Epoch})
		must(t, err)
		must(t, <-attached)

		// b is never heard of again: past LostAfter the call answers
		// node-lost, and loss detection settles its sandbox.
		start := time.Now()
		err = restarted.Attach(ctx, spec(onB, 1), nil)
		if !isLost(err) || time.Since(start) != 6*time.Second {
			t.Fatalf("attach on a node never heard of again = %v after %s; want node-lost after 6s", err, time.Since(start))
		}
		done := make(chan error, 1)
		go func() { done <- restarted.RunLossDetection(ctx) }()
		for range 4 {
			time.Sleep(3 * time.Second)
			_, err := restarted.Heartbeat(ctx, a.NodeID, fleetwire.Heartbeat{Epoch: a.Epoch})
			must(t, err)
		}
		synctest.Wait()
		if got := h.lost.got(); len(got) != 1 || got[0].Sandbox != onB {
			t.Fatalf("NodeLost calls = %+v; want %s's alone", got, onB)
		}
		cancel()
		must(t, <-done)
	})
}

// TestHostileRegistrations: a node cannot take another's name, claim
// sandboxes placed elsewhere, or register without a name or address.
func TestHostileRegistrations(t *testing.T) {
	h := newHarness(t, Config{})
	ctx := t.Context()
	h.join(t, "a", 2)
	b := h.join(t, "b", 2)
	must(t, h.f.Admit(ctx, spec("sbx_1", 2)))
	home := h.placedOn("sbx_1")

	// b, registering again, claims a's name.
	_, err := h.f.Register(ctx, b.NodeID, registration("a", 2))
	wantCode(t, err, api.CodeConflict)

	// A node claims every sandbox: it is assigned only its own.
	thief := "a"
	if home == "a" {
		thief = "b"
	}
	r := registration(thief, 2)
	r.Sandboxes = []string{"sbx_1"}
	adm, err := h.f.Register(ctx, h.nodeID(t, thief), r)
	must(t, err)
	if len(adm.Assigned) != 0 || h.placedOn("sbx_1") != home {
		t.Fatalf("a node claiming sbx_1 was assigned %v; sbx_1 is on %q, want %q", adm.Assigned, h.placedOn("sbx_1"), home)
	}
	for _, bad := range []fleetwire.Registration{{Name: "", Addr: "x:1"}, {Name: "c", Addr: ""}} {
		_, err := h.f.Register(ctx, "", bad)
		wantCode(t, err, api.CodeInvalidArgument)
	}
}
