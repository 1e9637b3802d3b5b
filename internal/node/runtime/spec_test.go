package runtime

import (
	"slices"
	"testing"
)

// TestAgentProcs: the agent runs Go code on as many threads as its
// sandbox has CPUs, rounded up, and on one at least; the spec gives it
// that as GOMAXPROCS.
func TestAgentProcs(t *testing.T) {
	for _, tt := range []struct {
		cpus float64
		want string
	}{
		{0.25, "GOMAXPROCS=1"},
		{1, "GOMAXPROCS=1"},
		{1.5, "GOMAXPROCS=2"},
		{4, "GOMAXPROCS=4"},
	} {
		env := ociSpec(Spec{CPUs: tt.cpus, MemoryMiB: 256, Pids: 64}, host{}).Process.Env
		if !slices.Contains(env, tt.want) {
			t.Errorf("%v CPUs: the agent's environment %q; want %s", tt.cpus, env, tt.want)
		}
	}
}
