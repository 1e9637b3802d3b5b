package meter

import (
	"context"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/page"
	"github.com/cove-dev/cove/internal/metering"
	"github.com/cove-dev/cove/internal/store"
)

// Priced adds what the sandbox costs per hour at the meter's prices.
func (m *Meter) Priced(sb api.Sandbox) api.Sandbox {
	p := metering.PerHour(m.cfg.Prices, sb.Resources)
	sb.PricePerHourUSD = &p
	return sb
}

// SandboxUsage is what a sandbox used and cost in its whole life.
func (m *Meter) SandboxUsage(ctx context.Context, teamID, ref string) (api.SandboxUsage, error) {
	sb, err := m.life.Sandbox(ctx, teamID, ref)
	if err != nil {
		return api.SandboxUsage{}, err
	}
	u, err := m.store.SumUsage(ctx, store.UsageFilter{TeamID: teamID, SandboxID: sb.ID})
	if err != nil {
		return api.SandboxUsage{}, err
	}
	out := api.SandboxUsage{SpendLimitUSD: sb.SpendLimitUSD, PricePerHourUSD: metering.PerHour(m.cfg.Prices, sb.Resources)}
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
func (m *Meter) Usage(ctx context.Context, teamID string, q UsageQuery) (api.UsageReport, error) {
	if err := page.Scoped(teamID); err != nil {
		return api.UsageReport{}, err
	}
	now := m.now()
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
		if items, err = m.store.SumUsage(ctx, store.UsageFilter{TeamID: teamID, From: from, To: to, GroupBy: q.GroupBy}); err != nil {
			return api.UsageReport{}, err
		}
	}
	total, err := m.store.SumUsage(ctx, store.UsageFilter{TeamID: teamID, From: from, To: to})
	if err != nil {
		return api.UsageReport{}, err
	}
	month, err := m.MonthSpend(ctx, teamID)
	if err != nil {
		return api.UsageReport{}, err
	}
	t, err := m.store.GetTeam(ctx, teamID)
	if err != nil {
		return api.UsageReport{}, err
	}
	r := api.UsageReport{From: from, To: to, GroupBy: q.GroupBy, Items: items, MonthCostUSD: month, SpendLimitUSD: t.SpendLimitUSD}
	if len(total) > 0 {
		r.Total = total[0]
	}
	return r, nil
}
