package lifecycle_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/lifecycle"
)

// fakeReplicas is this replica ("rep_me") among others whose liveness the
// test decides.
type fakeReplicas struct {
	mu    sync.Mutex
	alive map[string]bool
}

func (f *fakeReplicas) ReplicaID() string { return "rep_me" }

func (f *fakeReplicas) Alive(ctx context.Context, id string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return id == "rep_me" || f.alive[id], nil
}

func (f *fakeReplicas) OthersAlive(ctx context.Context) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, a := range f.alive {
		if a {
			return true, nil
		}
	}
	return false, nil
}

// leftBy stores sb as it is (its state and reason set by the caller) and
// claimed by owner: as if that replica had begun the transition and
// stopped.
func (h *harness) leftBy(t *testing.T, sb api.Sandbox, owner string) {
	t.Helper()
	if err := h.st.UpdateSandbox(t.Context(), sb); err != nil {
		t.Fatal(err)
	}
	if err := h.st.ClaimSandbox(t.Context(), sb.ID, owner); err != nil {
		t.Fatal(err)
	}
}

// TestLeaderFinishesDeadReplicasTransitions: a sandbox left creating by a
// replica that died is failed by the leader with a reason naming it; one
// whose replica lives, and one this replica drives itself, are left as
// they are. A transition this replica starts is claimed by it.
func TestLeaderFinishesDeadReplicasTransitions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarnessWith(t, func(c *lifecycle.Config) { c.LimitsInterval = time.Second })
		reps := &fakeReplicas{alive: map[string]bool{"rep_live": true, "rep_dead": false}}
		h.srv.SetReplicas(reps)
		ctx := t.Context()
		stuck := map[string]string{} // sandbox → the replica that claims it
		for _, owner := range []string{"rep_dead", "rep_live", "rep_me"} {
			sb, err := h.srv.CreateSandbox(ctx, h.a, api.CreateSandboxRequest{})
			if err != nil {
				t.Fatal(err)
			}
			sb = h.wait(t, h.a, sb.ID, api.StateRunning)
			if got, err := h.st.SandboxOwner(ctx, sb.ID); err != nil || got != "rep_me" {
				t.Fatalf("owner of a sandbox this replica created = %q, %v; want rep_me", got, err)
			}
			// As if another replica had begun creating it and stopped.
			sb.State = api.StateCreating
			h.leftBy(t, sb, owner)
			stuck[sb.ID] = owner
		}
		h.srv.Start()
		time.Sleep(30 * time.Second)
		synctest.Wait()
		for id, owner := range stuck {
			got := h.get(t, id)
			switch owner {
			case "rep_dead":
				if got.State != api.StateFailed || !strings.Contains(got.StateReason, "rep_dead stopped while the sandbox was creating") {
					t.Errorf("sandbox of the dead replica: %s (%s); want failed, naming it", got.State, got.StateReason)
				}
				if o, _ := h.st.SandboxOwner(ctx, id); o != "rep_me" {
					t.Errorf("the finished transition's owner = %q; want rep_me", o)
				}
			default:
				if got.State != api.StateCreating {
					t.Errorf("sandbox of %q: %s (%s); want left creating", owner, got.State, got.StateReason)
				}
			}
		}
	})
}

// TestRecoverSparesLiveReplicas: a replica that starts beside a live one
// leaves that replica's transitions as they are, and removes nothing from
// the node that the store does not know (it may be the other's), while a
// dead replica's transition is finished.
func TestRecoverSparesLiveReplicas(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		ctx := t.Context()
		ids := map[string]string{}
		for _, owner := range []string{"rep_live", "rep_dead"} {
			sb, err := h.srv.CreateSandbox(ctx, h.a, api.CreateSandboxRequest{})
			if err != nil {
				t.Fatal(err)
			}
			sb = h.wait(t, h.a, sb.ID, api.StateRunning)
			sb.State = api.StateCreating
			h.leftBy(t, sb, owner)
			ids[owner] = sb.ID
		}
		h.srv.SetReplicas(&fakeReplicas{alive: map[string]bool{"rep_live": true}})
		if err := h.srv.Recover(ctx); err != nil {
			t.Fatal(err)
		}
		if got := h.get(t, ids["rep_live"]); got.State != api.StateCreating {
			t.Errorf("the live replica's sandbox: %s (%s); want left creating", got.State, got.StateReason)
		}
		if _, ok := h.node.Sandbox(ids["rep_live"]); !ok {
			t.Error("the live replica's sandbox was removed from the node")
		}
		if got := h.get(t, ids["rep_dead"]); got.State != api.StateFailed {
			t.Errorf("the dead replica's sandbox: %s (%s); want failed", got.State, got.StateReason)
		}
	})
}
