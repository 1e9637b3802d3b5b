package workloads

import (
	"context"
	"fmt"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/metering"
	"github.com/cove-dev/cove/internal/store"
)

// A workload is charged for what it holds from its placement (placed_at:
// its container starts, its source lands, its program runs) to its end,
// whether its program ran or its start failed. Its usage is stored hour
// by hour under its ID beside the sandboxes' (GET /v1/usage, the team's
// month spend), and each hour's row is set, never added to: the meter
// sets the hours it ran in while it runs, and its end sets them all
// again, so nothing is charged twice.

// heldSince is when a workload began to hold the node's resources; nil
// for one never placed. Workloads stored before placed_at existed count
// from their program's start.
func heldSince(w api.Workload) *time.Time {
	if w.PlacedAt != nil {
		return w.PlacedAt
	}
	return w.StartedAt
}

// workloadCost is what a workload cost from its placement to t.
func (s *Service) workloadCost(w api.Workload, t time.Time) float64 {
	since := heldSince(w)
	if since == nil || !t.After(*since) {
		return 0
	}
	return metering.Workload(w.Resources, t.Sub(*since).Seconds()).Cost(s.cfg.Prices)
}

// Charge records an ended workload's usage, as its end does.
func (s *Service) Charge(ctx context.Context, w api.Workload) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.chargeWorkload(ctx, w)
}

// chargeWorkload records what an ended workload used, hour by hour from
// its placement to its end. The caller holds mu. Putting it is
// idempotent: charging a workload twice counts it once, and the hours
// the meter already set are set again to the same span's share.
func (s *Service) chargeWorkload(ctx context.Context, w api.Workload) {
	since := heldSince(w)
	if since == nil || w.EndedAt == nil || !w.EndedAt.After(*since) {
		return // it never held anything: it costs nothing
	}
	use := metering.Workload(w.Resources, w.EndedAt.Sub(*since).Seconds())
	accruals := s.meter.Hourly(w.ID, w.TeamID, *since, *w.EndedAt, use)
	if err := s.store.PutWorkloadUsage(context.WithoutCancel(ctx), accruals); err != nil {
		s.log.Error("record workload usage", "workload", w.ID, "cost_usd", w.CostUSD, "err", err)
	}
	delete(s.metered, w.ID)
}

// Meter charges every placed workload for what it held up to
// now, and returns them as charged (for the team budgets).
func (s *Service) Meter(ctx context.Context, now time.Time) []api.Workload {
	placed, err := s.store.ListWorkloads(ctx, store.WorkloadFilter{States: []api.WorkloadState{api.WorkloadStarting, api.WorkloadRunning}})
	if err != nil {
		s.log.Error("list workloads to meter", "err", err)
		return nil
	}
	out := placed[:0]
	for _, w := range placed {
		if w, ok := s.meterWorkload(ctx, w.TeamID, w.ID, now); ok {
			out = append(out, w)
		}
	}
	return out
}

// meterWorkload sets the usage of a placed workload in the hours from
// the one it was last metered in up to now, and its cost so far. It
// holds mu, so an end stored meanwhile is seen: an ended workload is
// its end's to charge.
func (s *Service) meterWorkload(ctx context.Context, teamID, id string, now time.Time) (api.Workload, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w, err := s.store.GetWorkload(ctx, teamID, id)
	if err != nil {
		s.log.Error("read workload to meter", "workload", id, "err", err)
		return w, false
	}
	since := heldSince(w)
	if w.State.Done() || since == nil || !now.After(*since) {
		return w, false
	}
	// Hours before the one last metered are complete; that one and the
	// later ones are set whole (an hour's row is replaced, not added to).
	from := *since
	if last, ok := s.metered[id]; ok {
		if h := last.Truncate(time.Hour); h.After(from) {
			from = h
		}
	}
	use := metering.Workload(w.Resources, now.Sub(from).Seconds())
	if err := s.store.PutWorkloadUsage(ctx, s.meter.Hourly(w.ID, w.TeamID, from, now, use)); err != nil {
		s.log.Error("record workload usage", "workload", id, "err", err)
		return w, false
	}
	s.metered[id] = now
	w.CostUSD = s.workloadCost(w, now)
	for attempt := 1; ; attempt++ {
		err := s.store.UpdateWorkload(ctx, w)
		if err == nil {
			w.Version++
			break
		}
		if !store.Stale(err) || attempt == store.UpdateAttempts {
			s.log.Warn("persist workload cost", "workload", id, "err", err)
			break
		}
		// Changed meanwhile (another replica): the cost goes onto the
		// workload as it is now, unless that one ended (its end charged it).
		cur, gerr := s.store.GetWorkload(ctx, teamID, id)
		if gerr != nil || cur.State.Done() {
			break
		}
		cur.CostUSD = s.workloadCost(cur, now)
		w = cur
	}
	return w, true
}

// CancelTeam cancels the workloads of a team whose monthly spend
// limit is reached (spent: its month spend), queued or placed, each with
// a budget.exceeded event naming it.
func (s *Service) CancelTeam(ctx context.Context, t api.Team, spent float64) {
	live, err := s.store.ListWorkloads(ctx, store.WorkloadFilter{TeamID: t.ID,
		States: []api.WorkloadState{api.WorkloadQueued, api.WorkloadStarting, api.WorkloadRunning}})
	if err != nil {
		s.log.Error("list workloads over the team's limit", "team", t.ID, "err", err)
		return
	}
	for _, w := range live {
		s.cancelForBudget(ctx, w, spent, *t.SpendLimitUSD)
	}
}

// cancelForBudget cancels a workload of a team at its monthly spend
// limit; its budget.exceeded comes before its workload.cancelled.
func (s *Service) cancelForBudget(ctx context.Context, w api.Workload, spent, limit float64) {
	reason := fmt.Sprintf("the team's monthly spend limit of $%g reached", limit)
	exceeded := func(api.Workload) (string, map[string]any) {
		return "budget.exceeded", map[string]any{"scope": "team", "cost_usd": spent, "spend_limit_usd": limit}
	}
	if _, err := s.cancelWorkload(ctx, w.TeamID, w.ID, reason, exceeded, false); err != nil {
		s.log.Error("cancel workload over the team's limit", "workload", w.ID, "err", err)
	}
}
