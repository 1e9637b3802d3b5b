package server

import (
	"context"
	"slices"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/metering"
	"github.com/cove-dev/cove/internal/store"
)

func validateOnBudget(v string) (string, error) {
	switch v {
	case "":
		return api.OnBudgetSleep, nil
	case api.OnBudgetSleep, api.OnBudgetTerminate:
		return v, nil
	}
	return "", invalid("on_budget is %q; use sleep or terminate", v)
}

// validateBudgetAlerts checks alert thresholds: percentages of the limit
// above 0 and below 100 (reaching 100 is budget.exceeded), at most 10.
func validateBudgetAlerts(in []float64) ([]float64, error) {
	if len(in) > 10 {
		return nil, invalid("budget_alerts has %d thresholds; at most 10", len(in))
	}
	out := slices.Clone(in)
	for _, v := range out {
		if !(v > 0 && v < 100) {
			return nil, invalid("budget_alerts: %v is not a percentage above 0 and below 100 (100%% raises budget.exceeded)", v)
		}
	}
	slices.Sort(out)
	out = slices.Compact(out)
	if out == nil {
		out = []float64{}
	}
	return out, nil
}

// priced adds what the sandbox costs per hour at the server's prices.
func (s *Server) priced(sb api.Sandbox) api.Sandbox {
	p := metering.PerHour(s.cfg.Prices, sb.Resources)
	sb.PricePerHourUSD = &p
	return sb
}

// SandboxUsage is what a sandbox used and cost in its whole life.
func (s *Server) SandboxUsage(ctx context.Context, teamID, ref string) (api.SandboxUsage, error) {
	sb, err := s.GetSandbox(ctx, teamID, ref)
	if err != nil {
		return api.SandboxUsage{}, err
	}
	u, err := s.store.SumUsage(ctx, store.UsageFilter{TeamID: teamID, SandboxID: sb.ID})
	if err != nil {
		return api.SandboxUsage{}, err
	}
	out := api.SandboxUsage{SpendLimitUSD: sb.SpendLimitUSD, PricePerHourUSD: metering.PerHour(s.cfg.Prices, sb.Resources)}
	if len(u) > 0 {
		out.Usage = u[0]
	}
	out.SandboxID = sb.ID
	out.CostUSD = sb.CostUSD // the same sum, kept on the sandbox
	return out, nil
}

// UsageQuery selects a team's usage report: hours in [From, To), grouped
// by day or sandbox (or "" for the total only).
type UsageQuery struct {
	From, To time.Time
	GroupBy  string
}

// Usage reports a team's usage. From defaults to the start of the month,
// To to now; both are rounded out to whole hours, the usage's grain.
func (s *Server) Usage(ctx context.Context, teamID string, q UsageQuery) (api.UsageReport, error) {
	if err := scoped(teamID); err != nil {
		return api.UsageReport{}, err
	}
	now := s.now()
	if q.To.IsZero() {
		q.To = now
	}
	if q.From.IsZero() {
		q.From = monthStart(now)
	}
	from := q.From.UTC().Truncate(time.Hour)
	to := q.To.UTC().Truncate(time.Hour)
	if to.Before(q.To) {
		to = to.Add(time.Hour)
	}
	if !from.Before(to) {
		return api.UsageReport{}, invalid("from (%s) must be before to (%s)", q.From.Format(time.RFC3339), q.To.Format(time.RFC3339))
	}
	switch q.GroupBy {
	case "", "day", "sandbox":
	default:
		return api.UsageReport{}, invalid("group_by is %q; use day or sandbox", q.GroupBy)
	}
	items := []api.Usage{}
	if q.GroupBy != "" {
		var err error
		if items, err = s.store.SumUsage(ctx, store.UsageFilter{TeamID: teamID, From: from, To: to, GroupBy: q.GroupBy}); err != nil {
			return api.UsageReport{}, err
		}
	}
	total, err := s.store.SumUsage(ctx, store.UsageFilter{TeamID: teamID, From: from, To: to})
	if err != nil {
		return api.UsageReport{}, err
	}
	month, err := s.monthSpend(ctx, teamID)
	if err != nil {
		return api.UsageReport{}, err
	}
	t, err := s.store.GetTeam(ctx, teamID)
	if err != nil {
		return api.UsageReport{}, err
	}
	r := api.UsageReport{From: from, To: to, GroupBy: q.GroupBy, Items: items, MonthCostUSD: month, SpendLimitUSD: t.SpendLimitUSD}
	if len(total) > 0 {
		r.Total = total[0]
	}
	return r, nil
}

// UpdateTeam changes a team's admission and monthly spend limit; only the
// admin team may. A negative spend_limit_usd removes the limit.
func (s *Server) UpdateTeam(ctx context.Context, p Principal, teamID string, req api.UpdateTeamRequest) (api.Team, error) {
	if !p.Admin() {
		return api.Team{}, api.Errorf(api.CodePermissionDenied, "only the admin team may change teams")
	}
	t, err := s.store.GetTeam(ctx, teamID)
	if err != nil {
		return api.Team{}, err
	}
	if err := checkAdmissionChange(t, req.Admission); err != nil {
		return api.Team{}, err
	}
	if req.Admission != nil {
		t.Admission = *req.Admission
	}
	if req.SpendLimitUSD != nil {
		t.SpendLimitUSD = req.SpendLimitUSD
		if *req.SpendLimitUSD < 0 {
			t.SpendLimitUSD = nil
		}
	}
	if req.BudgetAlerts != nil {
		if t.BudgetAlerts, err = validateBudgetAlerts(*req.BudgetAlerts); err != nil {
			return api.Team{}, err
		}
	}
	if err := s.store.UpdateTeam(ctx, t); err != nil {
		return api.Team{}, err
	}
	s.log.Info("team changed", "team", t.ID, "spend_limit_usd", t.SpendLimitUSD)
	return t, nil
}
