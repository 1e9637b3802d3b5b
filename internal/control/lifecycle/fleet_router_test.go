package lifecycle_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/fleet"
	"github.com/cove-dev/cove/internal/control/lifecycle"
	"github.com/cove-dev/cove/internal/fleet/fleetwire"
	"github.com/cove-dev/cove/internal/node"
	"github.com/cove-dev/cove/internal/node/nodetest"
)

// TestFleetNodeLoss runs the core over the fleet's router and one fake
// node: when the node falls silent, its sandbox with a save goes asleep
// saying so, and the one without fails node_lost with its running command
// lost, each with its event.
func TestFleetNodeLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarnessWith(t, func(c *lifecycle.Config) { c.KeepSaveAfterWake = true })
		ctx := t.Context()
		nd := nodetest.New()
		nd.OnExit = h.srv.OnExit
		hold := make(chan struct{})
		nd.Run = func(ctx context.Context, spec node.ExecSpec, out *nodetest.Output) node.Exit {
			select {
			case <-hold:
			case <-ctx.Done():
			}
			return node.Exit{}
		}
		t.Cleanup(nd.Close)
		defer close(hold)
		f, err := fleet.New(fleet.Config{Store: h.st, LostAfter: 10 * time.Second,
			Dial: func(nodeID, addr string) (fleet.NodeClient, error) { return nd, nil }})
		if err != nil {
			t.Fatal(err)
		}
		f.SetSandboxes(h.srv)
		if err := f.Load(ctx); err != nil {
			t.Fatal(err)
		}
		a, err := f.Register(ctx, "", fleetwire.Registration{Name: "a", Addr: "a:1",
			Capacity: fleetwire.Capacity{CPUs: 8, MemoryMiB: 16384}, Templates: []string{"managed", "other"}})
		if err != nil {
			t.Fatal(err)
		}
		h.plane.SetNode(f)

		saved := h.running(t, h.a, "saved")
		if _, err := h.srv.SleepSandbox(ctx, h.a, saved.ID, "test"); err != nil {
			t.Fatal(err)
		}
		h.wait(t, h.a, saved.ID, api.StateAsleep)
		if _, err := h.srv.WakeSandbox(ctx, h.a, saved.ID); err != nil {
			t.Fatal(err)
		}
		h.wait(t, h.a, saved.ID, api.StateRunning)
		bare := h.running(t, h.a, "bare")
		cmd, err := h.plane.Commands.Exec(ctx, h.a, bare.ID, true, api.CreateCommandRequest{Command: "sleep 100"})
		if err != nil {
			t.Fatal(err)
		}
		if n, ok := f.SandboxNode(bare.ID); !ok || n.ID != a.NodeID {
			t.Fatalf("bare is placed on %+v", n)
		}

		runCtx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- f.RunLossDetection(runCtx) }()
		time.Sleep(11 * time.Second) // no heartbeat
		synctest.Wait()
		stop()
		if err := <-done; err != nil {
			t.Fatal(err)
		}

		got := h.get(t, saved.ID)
		if got.State != api.StateAsleep || !strings.HasPrefix(got.StateReason, "node a was lost; it wakes from its save of ") {
			t.Fatalf("saved sandbox is %s (%q)", got.State, got.StateReason)
		}
		got = h.get(t, bare.ID)
		if got.State != api.StateFailed || !strings.HasPrefix(got.StateReason, "node_lost: node a was lost") {
			t.Fatalf("bare sandbox is %s (%q)", got.State, got.StateReason)
		}
		c, err := h.st.GetCommand(ctx, bare.ID, cmd.ID)
		if err != nil {
			t.Fatal(err)
		}
		if c.State != api.CommandLost {
			t.Fatalf("the running command is %s; want lost", c.State)
		}
		if ev := h.events(t, h.a, bare.ID); !slices.Contains(ev, "sandbox.failed") {
			t.Fatalf("bare's events %v lack sandbox.failed", ev)
		}
		asleep := 0
		for _, e := range h.events(t, h.a, saved.ID) {
			if e == "sandbox.asleep" {
				asleep++
			}
		}
		if asleep != 2 { // its sleep, then the loss
			t.Fatalf("saved has %d sandbox.asleep events; want 2", asleep)
		}
	})
}
