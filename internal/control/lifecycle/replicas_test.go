package lifecycle_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/lifecycle"
)

// TestReplicaPersistsActivity: a replica that does not lead runs no idle
// check, but stores the activity it saw, so that the leader's idle checks
// (which read the store) count a command run through it.
func TestReplicaPersistsActivity(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarnessWith(t, func(c *lifecycle.Config) { c.LimitsInterval = time.Second })
		h.srv.StartReplica()
		sb, err := h.srv.CreateSandbox(t.Context(), h.a, api.CreateSandboxRequest{IdleTimeoutS: i64(60)})
		if err != nil {
			t.Fatal(err)
		}
		h.wait(t, h.a, sb.ID, api.StateRunning)
		time.Sleep(50 * time.Second)
		active := time.Now()
		if _, err := h.plane.Commands.Exec(t.Context(), h.a, sb.ID, true, api.CreateCommandRequest{Command: "true"}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Second) // past the idle timeout from the create
		synctest.Wait()
		got := h.get(t, sb.ID)
		if got.State != api.StateRunning {
			t.Fatalf("a replica that does not lead acted on the sandbox: %s (%s)", got.State, got.StateReason)
		}
		if got.LastActiveAt == nil || got.LastActiveAt.Before(active) {
			t.Fatalf("last_active_at = %v; want the command's call at %v or later", got.LastActiveAt, active)
		}
	})
}
