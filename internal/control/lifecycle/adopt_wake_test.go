package lifecycle_test

import (
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/lifecycle"
)

// TestLeaderFinishesDeadReplicasWake: a wake left by a replica that died
// was asked for and answered, so the leader finishes it from the save:
// the sandbox runs. A wake cut short a second time (its replica died while
// it was being finished) goes back to asleep, its save kept, saying so.
func TestLeaderFinishesDeadReplicasWake(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarnessWith(t, func(c *lifecycle.Config) { c.LimitsInterval = time.Second })
		h.srv.SetReplicas(&fakeReplicas{alive: map[string]bool{"rep_dead": false}})
		ctx := t.Context()
		left := map[string]string{} // sandbox → its state reason as left
		for _, reason := range []string{"", lifecycle.ResumedWake + "the control plane replica rep_older stopped"} {
			sb, err := h.srv.CreateSandbox(ctx, h.a, api.CreateSandboxRequest{})
			if err != nil {
				t.Fatal(err)
			}
			h.wait(t, h.a, sb.ID, api.StateRunning)
			if _, err := h.srv.SleepSandbox(ctx, h.a, sb.ID, ""); err != nil {
				t.Fatal(err)
			}
			sb = h.wait(t, h.a, sb.ID, api.StateAsleep)
			// As if another replica had begun its wake and stopped.
			sb.State, sb.StateReason = api.StateWaking, reason
			h.leftBy(t, sb, "rep_dead")
			left[sb.ID] = reason
		}
		h.srv.Start()
		time.Sleep(30 * time.Second)
		synctest.Wait()
		for id, reason := range left {
			got := h.get(t, id)
			if reason == "" {
				if got.State != api.StateRunning {
					t.Errorf("the dead replica's wake: %s (%s); want running", got.State, got.StateReason)
				}
				continue
			}
			if got.State != api.StateAsleep || !strings.Contains(got.StateReason, "rep_dead stopped while the sandbox was waking a second time; wake it again") {
				t.Errorf("a wake cut short twice: %s (%s); want asleep, saying so", got.State, got.StateReason)
			}
		}
	})
}
