package server

import (
	"context"

	"github.com/cove-dev/cove/api"
)

// ChargeWorkload records an ended workload's usage, as its end does.
func (s *Server) ChargeWorkload(ctx context.Context, w api.Workload) {
	s.wl.Charge(ctx, w)
}
