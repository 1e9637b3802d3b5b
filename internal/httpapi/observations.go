package httpapi

import (
	"context"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/observations"
)

// Observations is what the API asks of the network observations
// (*observations.Service): a sandbox's policy and what it tried to reach
// (GET /v1/sandboxes/{ref}/network).
type Observations interface {
	Network(ctx context.Context, teamID, ref string) (api.NetworkView, error)
}

var _ Observations = (*observations.Service)(nil)
