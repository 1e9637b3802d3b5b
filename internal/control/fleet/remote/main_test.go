package remote_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a goroutine running: a
// client's or a server's streams, tunnels and outputs end with Close.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
