package local

import (
	"testing"

	"github.com/cove-dev/cove/internal/node"
)

// TestAgentPID: a pid the sandbox's agent answers is believed only when
// Linux could give it; else the command's pid is unknown (0).
func TestAgentPID(t *testing.T) {
	for _, tc := range []struct {
		in, want int
		ok       bool
	}{
		{1, 1, true},
		{4242, 4242, true},
		{node.MaxPID, node.MaxPID, true},
		{node.MaxPID + 1, 0, false},
		{1 << 40, 0, false},
		{0, 0, false},
		{-5, 0, false},
	} {
		if got, ok := agentPID(tc.in); got != tc.want || ok != tc.ok {
			t.Errorf("agentPID(%d) = %d, %v; want %d, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}
