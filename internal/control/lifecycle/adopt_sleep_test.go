package lifecycle_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/lifecycle"
)

// TestLeaderFinishesDeadReplicasSleep: a sandbox left sleeping by a
// replica that died is put to sleep by the leader, which finishes the
// sleep as Recover would (the sleep takes the sandbox's life-cycle lock
// itself, so the leader must not hold it meanwhile).
func TestLeaderFinishesDeadReplicasSleep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarnessWith(t, func(c *lifecycle.Config) { c.LimitsInterval = time.Second })
		h.srv.SetReplicas(&fakeReplicas{alive: map[string]bool{"rep_dead": false}})
		ctx := t.Context()
		sb, err := h.srv.CreateSandbox(ctx, h.a, api.CreateSandboxRequest{})
		if err != nil {
			t.Fatal(err)
		}
		sb = h.wait(t, h.a, sb.ID, api.StateRunning)
		// As if another replica had begun its sleep and stopped.
		sb.State = api.StateSleeping
		h.leftBy(t, sb, "rep_dead")
		h.srv.Start()
		time.Sleep(30 * time.Second)
		synctest.Wait()
		if got := h.get(t, sb.ID); got.State != api.StateAsleep {
			t.Errorf("the dead replica's sleeping sandbox: %s (%s); want asleep", got.State, got.StateReason)
		}
	})
}
