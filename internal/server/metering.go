package server

import (
	"context"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/meter"
	"github.com/cove-dev/cove/internal/metering"
	"github.com/cove-dev/cove/internal/node"
	"github.com/cove-dev/cove/internal/store"
)

// The meter (samples, charges, spend limits, usage and metrics) is
// internal/control/meter's. What the core and the API call of it is
// delegated here; meterLife is the core's side of the meter's Lifecycle.

// StatsNode is a node's optional ability to read its running sandboxes'
// counters; without it the meter still accrues costs, without samples.
type StatsNode = meter.StatsNode

// UsageQuery selects a team's usage report (meter.UsageQuery).
type UsageQuery = meter.UsageQuery

// MetricsQuery selects a sandbox's samples (meter.MetricsQuery).
type MetricsQuery = meter.MetricsQuery

// newMeter builds the server's meter, over the node the server is given
// later (SetNode) and the server's clock.
func (s *Server) newMeter() *meter.Meter {
	return meter.New(meter.Config{
		Prices: s.cfg.Prices, Interval: s.cfg.MetricsInterval,
		RawRetention: s.cfg.MetricsRawRetention, RollupRetention: s.cfg.MetricsRollupRetention,
	}, s.store, meterLife{s}, meterLife{s}, func() time.Time { return s.now() }, s.log)
}

// Meter is the server's meter, for the API's usage, spend and metrics
// reads.
func (s *Server) Meter() *meter.Meter { return s.meter }

func (s *Server) runMeter(ctx context.Context)      { s.meter.Run(ctx) }
func (s *Server) meterOnce(ctx context.Context)     { s.meter.Tick(ctx) }
func (s *Server) priced(sb api.Sandbox) api.Sandbox { return s.meter.Priced(sb) }
func (s *Server) monthSpend(ctx context.Context, teamID string) (float64, error) {
	return s.meter.MonthSpend(ctx, teamID)
}
func (s *Server) budgetRefusal(ctx context.Context, sb api.Sandbox) error {
	return s.meter.BudgetRefusal(ctx, sb)
}
func (s *Server) teamBudgetRefusal(ctx context.Context, teamID string) error {
	return s.meter.TeamBudgetRefusal(ctx, teamID)
}
func (s *Server) hourly(id, teamID string, from, to time.Time, use metering.Use) []store.Accrual {
	return s.meter.Hourly(id, teamID, from, to, use)
}
func validateOnBudget(v string) (string, error)            { return meter.ValidateOnBudget(v) }
func validateBudgetAlerts(in []float64) ([]float64, error) { return meter.ValidateBudgetAlerts(in) }

// SandboxUsage is what a sandbox used and cost in its whole life.
func (s *Server) SandboxUsage(ctx context.Context, teamID, ref string) (api.SandboxUsage, error) {
	return s.meter.SandboxUsage(ctx, teamID, ref)
}

// Usage reports a team's usage.
func (s *Server) Usage(ctx context.Context, teamID string, q UsageQuery) (api.UsageReport, error) {
	return s.meter.Usage(ctx, teamID, q)
}

// Metrics returns a sandbox's samples and the gaps in them.
func (s *Server) Metrics(ctx context.Context, teamID, ref string, q MetricsQuery) (api.Metrics, error) {
	return s.meter.Metrics(ctx, teamID, ref, q)
}

// meterLife is the core as the meter's Lifecycle and node: it reads the
// server's node when called, since the node is set after New.
type meterLife struct{ s *Server }

var (
	_ meter.Lifecycle = meterLife{}
	_ meter.StatsNode = meterLife{}
)

func (l meterLife) Sandbox(ctx context.Context, teamID, ref string) (api.Sandbox, error) {
	return l.s.GetSandbox(ctx, teamID, ref)
}

func (l meterLife) Sleep(ctx context.Context, teamID, id, reason string) error {
	_, err := l.s.SleepSandbox(ctx, teamID, id, reason)
	return err
}

func (l meterLife) Terminate(ctx context.Context, teamID, id string) error {
	_, err := l.s.TerminateSandbox(ctx, teamID, id)
	return err
}

func (l meterLife) FailSetup(ctx context.Context, sb api.Sandbox, reason string) {
	l.s.failSetup(ctx, sb, reason)
}

func (l meterLife) Emit(ctx context.Context, teamID, typ, sandboxID string, data map[string]any) {
	l.s.emit(ctx, teamID, typ, sandboxID, "", data)
}

func (l meterLife) EmitWorkload(ctx context.Context, w api.Workload, typ string, data map[string]any) {
	l.s.emitWorkload(ctx, w, typ, data)
}

func (l meterLife) MeterWorkloads(ctx context.Context, now time.Time) []api.Workload {
	return l.s.meterWorkloads(ctx, now)
}

func (l meterLife) CancelTeamWorkloads(ctx context.Context, t api.Team, spent float64) {
	l.s.cancelTeamWorkloads(ctx, t, spent)
}

// Stats reads the node's counters, when the node can.
func (l meterLife) Stats(ctx context.Context, ids []string) map[string]node.Stats {
	if sn, ok := l.s.node.(StatsNode); ok {
		return sn.Stats(ctx, ids)
	}
	return nil
}
