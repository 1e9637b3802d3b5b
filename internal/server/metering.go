package server

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/metering"
	"github.com/cove-dev/cove/internal/node"
	"github.com/cove-dev/cove/internal/store"
)

// StatsNode is a node's optional ability to read its running sandboxes'
// counters; without it the meter still accrues costs, without samples.
type StatsNode interface {
	// Stats reads the counters of the given sandboxes; those it cannot
	// read are missing from the answer.
	Stats(ctx context.Context, ids []string) map[string]node.Stats
}

// meterState is what the meter remembers of a sandbox between ticks.
type meterState struct {
	prev  *node.Stats // the last reading, for rates
	until time.Time   // accrued until (zero: never metered)
	// stored is the size of the sandbox's save, read once per sleep
	// (finishSleep records it before the sandbox is asleep).
	stored      int64
	storedKnown bool
}

// runMeter samples, accrues and checks budgets every MetricsInterval, and
// drops samples past their retention every minute.
func (s *Server) runMeter(ctx context.Context) {
	t := time.NewTicker(s.cfg.MetricsInterval)
	defer t.Stop()
	var expired time.Time
	for {
		select {
		case <-t.C:
			s.meterOnce(ctx)
			if time.Since(expired) > time.Minute {
				now := s.now()
				if err := s.store.DeleteSamplesBefore(ctx, now.Add(-s.cfg.MetricsRawRetention), now.Add(-s.cfg.MetricsRollupRetention)); err != nil {
					s.log.Error("expire samples", "err", err)
				}
				expired = time.Now()
			}
		case <-ctx.Done():
			return
		}
	}
}

// meterOnce is one tick of the meter: every running sandbox (a setup
// runs as running time does) is sampled and charged for its reserved
// resources and egress since the last tick, every asleep one for its
// save, every placed workload for its resources; then spend limits are
// checked.
func (s *Server) meterOnce(ctx context.Context) {
	sbs, err := s.store.ListSandboxes(ctx, store.SandboxFilter{States: []api.SandboxState{api.StateSettingUp, api.StateRunning, api.StateAsleep}})
	if err != nil {
		s.log.Error("list sandboxes to meter", "err", err)
		return
	}
	var running []string
	for _, sb := range sbs {
		if sb.State != api.StateAsleep {
			running = append(running, sb.ID)
		}
	}
	var stats map[string]node.Stats
	if sn, ok := s.node.(StatsNode); ok && len(running) > 0 {
		stats = sn.Stats(ctx, running)
	}
	now := s.now()
	var samples []store.Sample
	var accruals []store.Accrual
	seen := make(map[string]bool, len(sbs))
	spent := make(map[string]float64, len(sbs))
	for _, sb := range sbs {
		seen[sb.ID] = true
		ms, err := s.meterFor(ctx, sb.ID)
		if err != nil {
			s.log.Error("read meter", "sandbox", sb.ID, "err", err)
			continue
		}
		from := ms.until
		var use metering.Use
		switch sb.State {
		case api.StateRunning, api.StateSettingUp:
			ms.storedKnown = false
			if sb.StartedAt == nil {
				continue
			}
			if from.Before(*sb.StartedAt) {
				from = *sb.StartedAt
			}
			var egress int64
			if st, ok := stats[sb.ID]; ok {
				if smp, ok := s.sample(ms, sb, st); ok {
					samples = append(samples, store.Sample{
						SandboxID: sb.ID, Time: smp.Time, CPUMillicores: smp.CPUMillicores,
						MemoryBytes: smp.MemoryBytes, MemoryPeakBytes: smp.MemoryPeakBytes, DiskBytes: smp.DiskBytes,
						NetInBytes: smp.NetInBytes, NetOutBytes: smp.NetOutBytes,
					})
					egress = smp.NetOutBytes
				}
				ms.prev = &st
			}
			use = metering.Running(sb.Resources, now.Sub(from).Seconds(), egress)
		case api.StateAsleep:
			if from.IsZero() {
				ms.until = now // never metered: storage counts from now
				continue
			}
			if !ms.storedKnown {
				m, err := s.store.GetMeter(ctx, sb.ID)
				if err != nil {
					s.log.Error("read meter", "sandbox", sb.ID, "err", err)
					continue
				}
				ms.stored, ms.storedKnown = m.StoredBytes, true
			}
			use = metering.Stored(ms.stored, now.Sub(from).Seconds())
		}
		if !now.After(from) {
			continue
		}
		accruals = append(accruals, s.accruals(sb, from, now, use)...)
		ms.until = now
		spent[sb.ID] = sb.CostUSD + use.Cost(s.cfg.Prices)
	}
	s.meterMu.Lock()
	for id := range s.meters {
		if !seen[id] {
			delete(s.meters, id)
		}
	}
	s.meterMu.Unlock()
	if err := s.store.AppendSamples(ctx, samples); err != nil {
		s.log.Error("store samples", "samples", len(samples), "err", err)
	}
	if err := s.store.AccrueUsage(ctx, accruals); err != nil {
		// What the store did not take is charged again from its meter.
		s.log.Error("accrue usage", "err", err)
		s.meterMu.Lock()
		clear(s.meters)
		s.meterMu.Unlock()
		return
	}
	wls := s.meterWorkloads(ctx, now)
	s.checkBudgets(ctx, sbs, spent, wls)
}

// meterFor returns the meter's memory of a sandbox, reading how far it is
// accrued from the store the first time.
func (s *Server) meterFor(ctx context.Context, id string) (*meterState, error) {
	s.meterMu.Lock()
	ms, ok := s.meters[id]
	s.meterMu.Unlock()
	if ok {
		return ms, nil
	}
	m, err := s.store.GetMeter(ctx, id)
	if err != nil {
		return nil, err
	}
	ms = &meterState{}
	if m.AccruedUntil != nil {
		ms.until = *m.AccruedUntil
	}
	s.meterMu.Lock()
	s.meters[id] = ms
	s.meterMu.Unlock()
	return ms, nil
}

// sample makes the sample of a running sandbox from its last reading. A
// sandbox read for the first time since it started counts from its start
// (its cgroup and interface are new), unless the start is long past (the
// server restarted): then this reading is only the base of the next.
func (s *Server) sample(ms *meterState, sb api.Sandbox, st node.Stats) (metering.Sample, bool) {
	prev := ms.prev
	if prev == nil || prev.Time.Before(*sb.StartedAt) || st.CPUNanos < prev.CPUNanos {
		if st.Time.Sub(*sb.StartedAt) > 3*s.cfg.MetricsInterval {
			return metering.Sample{}, false
		}
		prev = &node.Stats{Time: *sb.StartedAt}
	}
	return metering.Diff(*prev, st)
}

// accruals splits a sandbox's use over [from, to) into the hours it falls
// in.
func (s *Server) accruals(sb api.Sandbox, from, to time.Time, use metering.Use) []store.Accrual {
	return s.hourly(sb.ID, sb.TeamID, from, to, use)
}

// hourly splits the use of a sandbox or workload (id) over [from, to)
// into the hours it falls in.
func (s *Server) hourly(id, teamID string, from, to time.Time, use metering.Use) []store.Accrual {
	total := to.Sub(from)
	var out []store.Accrual
	for t := from; t.Before(to); {
		hour := t.Truncate(time.Hour)
		end := hour.Add(time.Hour)
		if end.After(to) {
			end = to
		}
		u := use.Scale(float64(end.Sub(t)) / float64(total))
		out = append(out, store.Accrual{
			SandboxID: id, TeamID: teamID, Hour: hour,
			CPUS: u.CPUS, MemoryGiBS: u.MemoryGiBS, StorageGiBH: u.StorageGiBH, EgressBytes: u.EgressBytes,
			GPUS: u.GPUS, CostUSD: u.Cost(s.cfg.Prices), Until: end,
		})
		t = end
	}
	return out
}

// checkBudgets raises budget events and applies on_budget for sandboxes
// and teams whose spend limits were crossed; placed workloads (wls)
// answer to their team's limit.
func (s *Server) checkBudgets(ctx context.Context, sbs []api.Sandbox, spent map[string]float64, wls []api.Workload) {
	for _, sb := range sbs {
		if sb.SpendLimitUSD == nil {
			continue
		}
		cost, ok := spent[sb.ID]
		if !ok {
			cost = sb.CostUSD
		}
		step := s.checkBudget(ctx, sb.TeamID, sb.ID, sb.ID, "sandbox", cost, *sb.SpendLimitUSD, sb.BudgetAlerts, sb.OnBudget)
		if step.Next.Exceeded {
			s.onBudget(ctx, sb, fmt.Sprintf("spend limit of $%g reached", *sb.SpendLimitUSD))
		}
	}
	teams, err := s.store.ListTeams(ctx)
	if err != nil {
		s.log.Error("list teams for budgets", "err", err)
		return
	}
	month := monthStart(s.now())
	for _, t := range teams {
		if t.SpendLimitUSD == nil {
			continue
		}
		cost, err := s.monthSpend(ctx, t.ID)
		if err != nil {
			s.log.Error("team spend", "team", t.ID, "err", err)
			continue
		}
		limit := *t.SpendLimitUSD
		key := t.ID + "/" + month.Format("2006-01")
		step := s.checkBudget(ctx, t.ID, "", key, "team", cost, limit, t.BudgetAlerts, "")
		// A workload has no sandbox to name: its team's alerts name it
		// in their data, one event per placed workload.
		for _, pct := range step.Alerts {
			for _, w := range wls {
				if w.TeamID == t.ID {
					s.emitWorkload(ctx, w, "budget.alert", map[string]any{
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
				s.onBudget(ctx, sb, fmt.Sprintf("the team's monthly spend limit of $%g reached", limit))
			}
		}
		s.cancelTeamWorkloads(ctx, t, cost)
	}
}

// checkBudget checks one budget, raises its events and persists its
// state; its step says which alerts it raised and whether the limit is
// reached (Next.Exceeded).
func (s *Server) checkBudget(ctx context.Context, teamID, sandboxID, key, scope string, cost, limit float64, alerts []float64, onBudget string) metering.Step {
	b, err := s.store.GetBudgetState(ctx, key)
	if err != nil {
		s.log.Error("read budget", "budget", key, "err", err)
		return metering.Step{Next: metering.Budget{Exceeded: metering.Reached(cost, &limit)}}
	}
	step := metering.Check(metering.Budget{Alerted: b.Alerted, Exceeded: b.Exceeded}, cost, limit, alerts)
	for _, pct := range step.Alerts {
		s.emit(ctx, teamID, "budget.alert", sandboxID, "", map[string]any{
			"scope": scope, "threshold_pct": pct, "cost_usd": cost, "spend_limit_usd": limit,
		})
	}
	if step.Exceeded {
		data := map[string]any{"scope": scope, "cost_usd": cost, "spend_limit_usd": limit}
		if scope == "sandbox" {
			data["on_budget"] = onBudgetOf(onBudget)
		}
		s.emit(ctx, teamID, "budget.exceeded", sandboxID, "", data)
	}
	if !slices.Equal(step.Next.Alerted, b.Alerted) || step.Next.Exceeded != b.Exceeded {
		if err := s.store.PutBudgetState(ctx, store.BudgetState{Key: key, Alerted: step.Next.Alerted, Exceeded: step.Next.Exceeded}); err != nil {
			s.log.Error("persist budget", "budget", key, "err", err)
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
func (s *Server) onBudget(ctx context.Context, sb api.Sandbox, reason string) {
	var err error
	switch {
	case sb.State == api.StateSettingUp:
		s.failSetup(ctx, sb, reason+" during setup; a sandbox in setup cannot sleep")
	case onBudgetOf(sb.OnBudget) == api.OnBudgetTerminate:
		_, err = s.TerminateSandbox(ctx, sb.TeamID, sb.ID)
	case sb.State == api.StateRunning:
		_, err = s.SleepSandbox(ctx, sb.TeamID, sb.ID, reason)
	}
	if err != nil {
		s.log.Error("act on spend limit", "sandbox", sb.ID, "err", err)
	}
}

func monthStart(t time.Time) time.Time {
	t = t.UTC()
	return time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
}

// monthSpend is what a team spent in the current calendar month (UTC).
func (s *Server) monthSpend(ctx context.Context, teamID string) (float64, error) {
	u, err := s.store.SumUsage(ctx, store.UsageFilter{TeamID: teamID, From: monthStart(s.now())})
	if err != nil || len(u) == 0 {
		return 0, err
	}
	return u[0].CostUSD, nil
}

// budgetRefusal refuses, with budget_exceeded, work that would spend more
// in a sandbox whose own or whose team's spend limit is reached.
func (s *Server) budgetRefusal(ctx context.Context, sb api.Sandbox) error {
	if metering.Reached(sb.CostUSD, sb.SpendLimitUSD) {
		return &api.Error{
			Code: api.CodeBudgetExceeded,
			Message: fmt.Sprintf("sandbox %s has spent $%.4f, its spend limit is $%g; raise spend_limit_usd (PATCH /v1/sandboxes/%s) to use it again",
				sb.ID, sb.CostUSD, *sb.SpendLimitUSD, sb.ID),
			Details: map[string]any{"scope": "sandbox", "cost_usd": sb.CostUSD, "spend_limit_usd": *sb.SpendLimitUSD},
		}
	}
	return s.teamBudgetRefusal(ctx, sb.TeamID)
}

// teamBudgetRefusal refuses, with budget_exceeded, work of a team whose
// monthly spend limit is reached.
func (s *Server) teamBudgetRefusal(ctx context.Context, teamID string) error {
	t, err := s.store.GetTeam(ctx, teamID)
	if err != nil || t.SpendLimitUSD == nil {
		return err
	}
	cost, err := s.monthSpend(ctx, teamID)
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
