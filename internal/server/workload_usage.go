package server

import (
	"context"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/metering"
)

// chargeWorkload records what an ended workload used, hour by hour from
// its start to its end, beside the sandboxes' usage: it then counts in
// GET /v1/usage (keyed by the workload's ID) and in its team's monthly
// spend, which the meter checks against the team's limit. Putting it is
// idempotent, so charging a workload twice counts it once.
func (s *Server) chargeWorkload(ctx context.Context, w api.Workload) {
	if w.StartedAt == nil || w.EndedAt == nil || !w.EndedAt.After(*w.StartedAt) {
		return // it never ran: it costs nothing
	}
	use := metering.Workload(w.Resources, w.EndedAt.Sub(*w.StartedAt).Seconds())
	accruals := s.hourly(w.ID, w.TeamID, *w.StartedAt, *w.EndedAt, use)
	if err := s.store.PutWorkloadUsage(context.WithoutCancel(ctx), accruals); err != nil {
		s.log.Error("record workload usage", "workload", w.ID, "cost_usd", w.CostUSD, "err", err)
	}
}
