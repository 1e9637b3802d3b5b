package lifecycle_test

import (
	"context"
	"slices"
	"testing"
	"testing/synctest"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/lifecycle"
	"github.com/cove-dev/cove/internal/node"
	"github.com/cove-dev/cove/internal/node/nodetest"
)

// TestNodeLost: a sandbox whose node a fleet lost goes asleep when it has
// a save and fails (state_reason node_lost…) when it has none; its
// running command ends lost and the events say it; an asleep sandbox is
// left alone.
func TestNodeLost(t *testing.T) {
	tests := []struct {
		name   string
		saved  bool
		reason string
		want   api.SandboxState
		event  string
	}{
		{"with a save", true, "node n1 was lost; it wakes from its save of 2026-01-01T00:00:00Z (10 bytes)", api.StateAsleep, "sandbox.asleep"},
		{"without a save", false, "node_lost: node n1 was lost and the sandbox had no save", api.StateFailed, "sandbox.failed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newHarness(t)
				hold := make(chan struct{})
				defer close(hold)
				h.node.Run = func(ctx context.Context, spec node.ExecSpec, out *nodetest.Output) node.Exit {
					select {
					case <-hold:
					case <-ctx.Done():
					}
					return node.Exit{}
				}
				sb := h.running(t, h.a, "lost")
				res, err := h.plane.Commands.Exec(t.Context(), h.a, sb.ID, true, api.CreateCommandRequest{Command: "sleep 100"})
				if err != nil {
					t.Fatal(err)
				}
				if err := h.srv.NodeLost(t.Context(), sb.ID, tt.saved, tt.reason); err != nil {
					t.Fatal(err)
				}
				got := h.get(t, sb.ID)
				if got.State != tt.want || got.StateReason != tt.reason {
					t.Fatalf("sandbox is %s (%q); want %s (%q)", got.State, got.StateReason, tt.want, tt.reason)
				}
				cmd, err := h.st.GetCommand(t.Context(), sb.ID, res.ID)
				if err != nil {
					t.Fatal(err)
				}
				if cmd.State != api.CommandLost {
					t.Fatalf("running command is %s after the node was lost; want lost", cmd.State)
				}
				synctest.Wait()
				if ev := h.events(t, h.a, sb.ID); !slices.Contains(ev, tt.event) {
					t.Fatalf("events %v lack %s", ev, tt.event)
				}
				// Settled once: a second report changes nothing.
				if err := h.srv.NodeLost(t.Context(), sb.ID, false, "node_lost: again"); err != nil {
					t.Fatal(err)
				}
				if again := h.get(t, sb.ID); again.StateReason != tt.reason {
					t.Fatalf("a second loss rewrote the reason to %q", again.StateReason)
				}
			})
		})
	}
}

// TestKeepSaveAfterWake: with KeepSaveAfterWake a woken sandbox's save is
// not dropped; without it, it is.
func TestKeepSaveAfterWake(t *testing.T) {
	for _, keep := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			h := newHarnessWith(t, func(c *lifecycle.Config) { c.KeepSaveAfterWake = keep })
			sb := h.running(t, h.a, "keep")
			if _, err := h.srv.SleepSandbox(t.Context(), h.a, sb.ID, "test"); err != nil {
				t.Fatal(err)
			}
			h.wait(t, h.a, sb.ID, api.StateAsleep)
			if _, err := h.srv.WakeSandbox(t.Context(), h.a, sb.ID); err != nil {
				t.Fatal(err)
			}
			h.wait(t, h.a, sb.ID, api.StateRunning)
			synctest.Wait()
			dropped := slices.Contains(h.node.Calls(), "drop-save "+sb.ID)
			if dropped == keep {
				t.Fatalf("KeepSaveAfterWake=%v: save dropped after the wake = %v", keep, dropped)
			}
		})
	}
}

// lostErr is how a fleet's router answers for a sandbox whose node has
// not come back.
type lostErr struct{}

func (lostErr) Error() string  { return "node n1 is not connected" }
func (lostErr) NodeLost() bool { return true }

// TestRecoverLeavesLostNodes: after a restart, a running sandbox whose
// node has not come back is left to the fleet's loss path, not failed;
// one the node cannot reattach for another reason fails as before.
func TestRecoverLeavesLostNodes(t *testing.T) {
	for _, lost := range []bool{true, false} {
		synctest.Test(t, func(t *testing.T) {
			h := newHarness(t)
			sb := h.running(t, h.a, "recover")
			var err error = lostErr{}
			if !lost {
				err = api.Errorf(api.CodeNotFound, "gone")
			}
			h.node.Fail("attach", err)
			if err := h.srv.Recover(t.Context()); err != nil {
				t.Fatal(err)
			}
			got := h.get(t, sb.ID)
			if want := map[bool]api.SandboxState{true: api.StateRunning, false: api.StateFailed}[lost]; got.State != want {
				t.Fatalf("node lost=%v: sandbox is %s (%s) after Recover; want %s", lost, got.State, got.StateReason, want)
			}
			if lost && slices.Contains(h.node.Calls(), "destroy "+sb.ID) {
				t.Fatal("Recover destroyed a sandbox whose node is not back yet")
			}
		})
	}
}
