package fleet_test

import (
	"github.com/cove-dev/cove/internal/control/fleet"
	"github.com/cove-dev/cove/internal/control/lifecycle"
	"github.com/cove-dev/cove/internal/control/meter"
	"github.com/cove-dev/cove/internal/control/previews"
	"github.com/cove-dev/cove/internal/node"
	"github.com/cove-dev/cove/internal/node/nodetest"
)

// The router is the core's one node, the meter's and the previews' node,
// and tells workloads its GPUs; nodetest's node is a node client.
var (
	_ lifecycle.Node                = (*fleet.Fleet)(nil)
	_ meter.StatsNode               = (*fleet.Fleet)(nil)
	_ previews.PortNode             = (*fleet.Fleet)(nil)
	_ interface{ GPUs() node.GPUs } = (*fleet.Fleet)(nil)
	_ fleet.NodeClient              = (*nodetest.Node)(nil)
	_ fleet.Sandboxes               = (*lifecycle.Core)(nil)
)
