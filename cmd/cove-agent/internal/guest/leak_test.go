package guest

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when a goroutine they started is
// still running after them: the agent's servers, command supervisors,
// output readers and reapers all end with what owns them.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
