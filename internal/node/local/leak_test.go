package local

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain sets up what the root tests need (wake_linux_test.go), then
// fails the package's tests when a goroutine they started is still
// running after them: every goroutine of the node has an owner that
// waits for it.
func TestMain(m *testing.M) {
	cleanup := setupRoot()
	code := m.Run()
	cleanup()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: errors on successful test run: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}
