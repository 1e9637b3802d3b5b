package meter

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/metering"
	"github.com/cove-dev/cove/internal/store"
)

// checkBudgets raises budget events and applies on_budget for sandboxes
// and teams whose spend limits were crossed; placed workloads (wls)
// answer to their team's limit.
func (m *Meter) checkBudgets(ctx context.Context, sbs []api.Sandbox, spent map[string]float64, wls []api.Workload) {
	for _, sb := range sbs {
		if sb.SpendLimitUSD == nil {
			continue
		}
		cost, ok := spent[sb.ID]
		if !ok {
			cost = sb.CostUSD
		}
		step := m.checkBudget(ctx, sb.TeamID, sb.ID, sb.ID, "sandbox", cost, *sb.SpendLimitUSD, sb.BudgetAlerts, sb.OnBudget)
		if step.Next.Exceeded {
			m.onBudget(ctx, sb, fmt.Sprintf("spend limit of $%g reached", *sb.SpendLimitUSD))
		}
	}
	teams, err := m.store.ListTeams(ctx)
	if err != nil {
		m.log.Error("list teams for budgets", "err", err)
		return
	}
	month := monthStart(m.now())
	for _, t := range teams {
		if t.SpendLimitUSD == nil {
			continue
		}
		cost, err := m.MonthSpend(ctx, t.ID)
		if err != nil {
			m.log.Error("team spend", "team", t.ID, "err", err)
			continue
		}
		limit := *t.SpendLimitUSD
		key := t.ID + "/" + month.Format("2006-01")
		step := m.checkBudget(ctx, t.ID, "", key, "team", cost, limit, t.BudgetAlerts, "")
		// A workload has no sandbox to name: its team's alerts name it
		// in their data, one event per placed workload.
		for _, pct := range step.Alerts {
			for _, w := range wls {
				if w.TeamID == t.ID {
					m.life.EmitWorkload(ctx, w, "budget.alert", map[string]any{
						"scope": "team", "threshold_pct": pct, "cost_usd": cost, "spend_limit_usd": limit,
					})
				}
			}
		}
		if !step.Next.Exceeded {
			continue
		}
		for _, sb := range sbs {
			if sb.TeamID == t.ID {
				m.onBudget(ctx, sb, fmt.Sprintf("the team's monthly spend limit of $%g reached", limit))
			}
		}
		m.life.CancelTeamWorkloads(ctx, t, cost)
	}
}

// checkBudget checks one budget, raises its events and persists its
// state; its step says which alerts it raised and whether the limit is
// reached (Next.Exceeded).
func (m *Meter) checkBudget(ctx context.Context, teamID, sandboxID, key, scope string, cost, limit float64, alerts []float64, onBudget string) metering.Step {
	b, err := m.store.GetBudgetState(ctx, key)
	if err != nil {
		m.log.Error("read budget", "budget", key, "err", err)
		return metering.Step{Next: metering.Budget{Exceeded: metering.Reached(cost, &limit)}}
	}
	step := metering.Check(metering.Budget{Alerted: b.Alerted, Exceeded: b.Exceeded}, cost, limit, alerts)
	for _, pct := range step.Alerts {
		m.life.Emit(ctx, teamID, "budget.alert", sandboxID, map[string]any{
			"scope": scope, "threshold_pct": pct, "cost_usd": cost, "spend_limit_usd": limit,
		})
	}
	if step.Exceeded {
		data := map[string]any{"scope": scope, "cost_usd": cost, "spend_limit_usd": limit}
		if scope == "sandbox" {
			data["on_budget"] = onBudgetOf(onBudget)
		}
		m.life.Emit(ctx, teamID, "budget.exceeded", sandboxID, data)
	}
	if !slices.Equal(step.Next.Alerted, b.Alerted) || step.Next.Exceeded != b.Exceeded {
		if err := m.store.PutBudgetState(ctx, store.BudgetState{Key: key, Alerted: step.Next.Alerted, Exceeded: step.Next.Exceeded}); err != nil {
			m.log.Error("persist budget", "budget", key, "err", err)
		}
	}
	return step
}

func onBudgetOf(v string) string {
	if v == "" {
		return api.OnBudgetSleep
	}
	return v
}

// onBudget applies a sandbox's on_budget: a running sandbox sleeps (or
// is terminated); an asleep one is terminated if so asked. A sandbox in
// setup cannot sleep: it fails, whatever its on_budget.
func (m *Meter) onBudget(ctx context.Context, sb api.Sandbox, reason string) {
	var err error
	switch {
	case sb.State == api.StateSettingUp:
		m.life.FailSetup(ctx, sb, reason+" during setup; a sandbox in setup cannot sleep")
	case onBudgetOf(sb.OnBudget) == api.OnBudgetTerminate:
		err = m.life.Terminate(ctx, sb.TeamID, sb.ID)
	case sb.State == api.StateRunning:
		err = m.life.Sleep(ctx, sb.TeamID, sb.ID, reason)
	}
	if err != nil {
		m.log.Error("act on spend limit", "sandbox", sb.ID, "err", err)
	}
}

// monthStart is the start of t's calendar month (UTC), where a team's
// monthly spend counts from.
func monthStart(t time.Time) time.Time {
	t = t.UTC()
	return time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
}

// MonthSpend is what a team spent in the current calendar month (UTC).
func (m *Meter) MonthSpend(ctx context.Context, teamID string) (float64, error) {
	u, err := m.store.SumUsage(ctx, store.UsageFilter{TeamID: teamID, From: monthStart(m.now())})
	if err != nil || len(u) == 0 {
		return 0, err
	}
	return u[0].CostUSD, nil
}

// BudgetRefusal refuses, with budget_exceeded, work that would spend more
// in a sandbox whose own or whose team's spend limit is reached.
func (m *Meter) BudgetRefusal(ctx context.Context, sb api.Sandbox) error {
	if metering.Reached(sb.CostUSD, sb.SpendLimitUSD) {
		return &api.Error{
			Code: api.CodeBudgetExceeded,
			Message: fmt.Sprintf("sandbox %s has spent $%.4f, its spend limit is $%g; raise spend_limit_usd (PATCH /v1/sandboxes/%s) to use it again",
				sb.ID, sb.CostUSD, *sb.SpendLimitUSD, sb.ID),
			Details: map[string]any{"scope": "sandbox", "cost_usd": sb.CostUSD, "spend_limit_usd": *sb.SpendLimitUSD},
		}
	}
	return m.TeamBudgetRefusal(ctx, sb.TeamID)
}

// TeamBudgetRefusal refuses, with budget_exceeded, work of a team whose
// monthly spend limit is reached.
func (m *Meter) TeamBudgetRefusal(ctx context.Context, teamID string) error {
	t, err := m.store.GetTeam(ctx, teamID)
	if err != nil || t.SpendLimitUSD == nil {
		return err
	}
	cost, err := m.MonthSpend(ctx, teamID)
	if err != nil {
		return err
	}
	if !metering.Reached(cost, t.SpendLimitUSD) {
		return nil
	}
	return &api.Error{
		Code: api.CodeBudgetExceeded,
		Message: fmt.Sprintf("team %s has spent $%.4f this month, its monthly spend limit is $%g; an admin can raise it (PATCH /v1/teams/%s)",
			t.Name, cost, *t.SpendLimitUSD, t.ID),
		Details: map[string]any{"scope": "team", "cost_usd": cost, "spend_limit_usd": *t.SpendLimitUSD},
	}
}

// ValidateOnBudget checks a sandbox's on_budget; "" is sleep.
func ValidateOnBudget(v string) (string, error) {
	switch v {
	case "":
		return api.OnBudgetSleep, nil
	case api.OnBudgetSleep, api.OnBudgetTerminate:
		return v, nil
	}
	return "", invalid("on_budget is %q; use sleep or terminate", v)
}

// ValidateBudgetAlerts checks alert thresholds: percentages of the limit
// above 0 and below 100 (reaching 100 is budget.exceeded), at most 10.
// It returns them sorted, without repeats.
func ValidateBudgetAlerts(in []float64) ([]float64, error) {
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

func invalid(format string, args ...any) error {
	return api.Errorf(api.CodeInvalidArgument, format, args...)
}
