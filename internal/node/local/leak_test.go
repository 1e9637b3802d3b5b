package local

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when a goroutine they started is
// still running after them: every goroutine of the node has an owner
// that waits for it.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
