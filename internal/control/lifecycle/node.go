package lifecycle

import (
	"github.com/cove-dev/cove/internal/control/previews"
	"github.com/cove-dev/cove/internal/node"
)

// Node is what the control plane asks of the node that runs its sandboxes:
// the node's contract (internal/node) and what previews ask of it. The
// node in this process implements it (internal/node/local) in `cove
// serve`; the fleet's router (internal/control/fleet) in `cove control`;
// unit tests use a fake.
type Node interface {
	previews.PortNode
	node.Contract
	node.Watches
}
