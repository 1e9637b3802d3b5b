// Package workloads holds the root tests of batch runs: a CPU workload on
// the managed environment with its output replayed and followed, the GPU
// refusals and the queue (cancel, max_queue_s, a restart), the runc spec
// of a GPU workload built from CDI specs, timeouts, and isolation.
package workloads

import (
	"testing"

	"github.com/cove-dev/cove/internal/e2e/e2etest"
)

func TestMain(m *testing.M) { e2etest.Main(m) }
