package remote_test

import (
	"github.com/cove-dev/cove/internal/control/fleet/remote"
	"github.com/cove-dev/cove/internal/control/lifecycle"
	"github.com/cove-dev/cove/internal/control/meter"
	"github.com/cove-dev/cove/internal/node"
)

// A remote node is a node to the control plane's core, its meter and its
// workloads.
var (
	_ lifecycle.Node                = (*remote.Client)(nil)
	_ meter.StatsNode               = (*remote.Client)(nil)
	_ interface{ GPUs() node.GPUs } = (*remote.Client)(nil)
)
