package nodeapi_test

import (
	"github.com/cove-dev/cove/internal/node/local"
	"github.com/cove-dev/cove/internal/node/nodeapi"
)

// The node of a host serves the API as it is.
var _ nodeapi.Node = (*local.Node)(nil)
