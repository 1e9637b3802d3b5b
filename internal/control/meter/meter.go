// Package meter is the control plane's meter: every MetricsInterval it
// samples the running sandboxes, charges them (and the asleep ones'
// saves) hour by hour in the store, and checks the sandboxes' and teams'
// spend limits, raising budget events and acting on them (on_budget:
// sleep or terminate; a setup fails; a team's workloads are cancelled).
// It answers the usage, spend and metrics reads, and refuses work over a
// reached limit (budget_exceeded).
//
// The arithmetic (samples, prices, thresholds) is internal/metering's;
// the store, the node and the sandboxes' life cycle are reached through
// the small interfaces below, which the core (internal/control/lifecycle) and the
// store implement. The meter never changes a sandbox's state itself: it
// asks its Lifecycle.
package meter

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/metering"
	"github.com/cove-dev/cove/internal/node"
	"github.com/cove-dev/cove/internal/store"
)

// Config is the meter's part of the control plane's configuration.
type Config struct {
	// Prices is the price table.
	Prices api.Prices
	// Interval is how often the meter samples and charges (MetricsInterval).
	Interval time.Duration
	// RawRetention is how long raw samples are kept; 1-minute rollups
	// are kept RollupRetention.
	RawRetention, RollupRetention time.Duration
}

// Store is the part of the store the meter reads and writes.
type Store interface {
	GetTeam(ctx context.Context, id string) (api.Team, error)
	ListTeams(ctx context.Context) ([]api.Team, error)
	ListSandboxes(ctx context.Context, f store.SandboxFilter) ([]api.Sandbox, error)
	ListEvents(ctx context.Context, f store.EventFilter) ([]api.Event, error)

	AppendSamples(ctx context.Context, samples []store.Sample) error
	ListSamples(ctx context.Context, sandboxID string, from, to time.Time, limit int) ([]store.Sample, error)
	ListMinutes(ctx context.Context, sandboxID string, from, to time.Time, limit int) ([]store.Minute, error)
	DeleteSamplesBefore(ctx context.Context, raw, minutes time.Time) error
	AccrueUsage(ctx context.Context, accruals []store.Accrual) error
	GetMeter(ctx context.Context, sandboxID string) (store.Meter, error)
	SumUsage(ctx context.Context, f store.UsageFilter) ([]api.Usage, error)
	GetBudgetState(ctx context.Context, key string) (store.BudgetState, error)
	PutBudgetState(ctx context.Context, b store.BudgetState) error
}

var _ Store = store.Store(nil)

// StatsNode is a node's optional ability to read its running sandboxes'
// counters; without it the meter still accrues costs, without samples.
type StatsNode interface {
	// Stats reads the counters of the given sandboxes; those it cannot
	// read are missing from the answer.
	Stats(ctx context.Context, ids []string) map[string]node.Stats
}

// Lifecycle is what the meter asks of the sandboxes' and workloads'
// owner, the core: their events, the actions of a reached spend limit,
// and the placed workloads' charges (the workloads are the core's).
type Lifecycle interface {
	// Sandbox finds a sandbox of the team by ID or name (not found for
	// another team's).
	Sandbox(ctx context.Context, teamID, ref string) (api.Sandbox, error)
	// Sleep puts a running sandbox to sleep, giving reason.
	Sleep(ctx context.Context, teamID, id, reason string) error
	// Terminate terminates a sandbox.
	Terminate(ctx context.Context, teamID, id string) error
	// FailSetup stops a sandbox's setup and fails it with reason.
	FailSetup(ctx context.Context, sb api.Sandbox, reason string)
	// Emit appends an event to the team's log.
	Emit(ctx context.Context, teamID, typ, sandboxID string, data map[string]any)
	// EmitWorkload appends an event naming a workload.
	EmitWorkload(ctx context.Context, w api.Workload, typ string, data map[string]any)
	// MeterWorkloads charges every placed workload up to now and returns
	// them as charged.
	MeterWorkloads(ctx context.Context, now time.Time) []api.Workload
	// CancelTeamWorkloads cancels the queued and placed workloads of a
	// team at its monthly spend limit (spent: its month spend).
	CancelTeamWorkloads(ctx context.Context, t api.Team, spent float64)
}

// Meter samples, charges and enforces spend limits; see the package doc.
type Meter struct {
	cfg   Config
	store Store
	node  StatsNode // nil: no samples
	life  Lifecycle
	log   *slog.Logger
	now   func() time.Time

	// mu guards meters, the meter's memory of each sandbox it meters.
	mu     sync.Mutex
	meters map[string]*state
}

// New returns a meter over st; nd may be nil (no samples). now is the
// clock (UTC).
func New(cfg Config, st Store, nd StatsNode, life Lifecycle, now func() time.Time, log *slog.Logger) *Meter {
	return &Meter{cfg: cfg, store: st, node: nd, life: life, log: log, now: now, meters: map[string]*state{}}
}

// state is what the meter remembers of a sandbox between ticks.
type state struct {
	prev  *node.Stats // the last reading, for rates
	until time.Time   // accrued until (zero: never metered)
	// cursor is the store's accrued_until as this meter last read or
	// wrote it (nil: never metered): each accrual is conditional on it, so
	// that a meter on another replica that charged meanwhile wins.
	cursor *time.Time
	// stored is the size of the sandbox's save, read once per sleep
	// (the core records it before the sandbox is asleep).
	stored      int64
	storedKnown bool
}

// Run samples, accrues and checks budgets every Interval, and drops
// samples past their retention every minute, until ctx ends.
func (m *Meter) Run(ctx context.Context) {
	t := time.NewTicker(m.cfg.Interval)
	defer t.Stop()
	var expired time.Time
	for {
		select {
		case <-t.C:
			m.Tick(ctx)
			if time.Since(expired) > time.Minute {
				now := m.now()
				if err := m.store.DeleteSamplesBefore(ctx, now.Add(-m.cfg.RawRetention), now.Add(-m.cfg.RollupRetention)); err != nil {
					m.log.Error("expire samples", "err", err)
				}
				expired = time.Now()
			}
		case <-ctx.Done():
			return
		}
	}
}

// Tick is one tick of the meter: every running sandbox (a setup runs as
// running time does) is sampled and charged for its reserved resources
// and egress since the last tick, every asleep one for its save, every
// placed workload for its resources; then spend limits are checked.
func (m *Meter) Tick(ctx context.Context) {
	sbs, err := m.store.ListSandboxes(ctx, store.SandboxFilter{States: []api.SandboxState{api.StateSettingUp, api.StateRunning, api.StateAsleep}})
	if err != nil {
		m.log.Error("list sandboxes to meter", "err", err)
		return
	}
	var running []string
	for _, sb := range sbs {
		if sb.State != api.StateAsleep {
			running = append(running, sb.ID)
		}
	}
	var stats map[string]node.Stats
	if m.node != nil && len(running) > 0 {
		stats = m.node.Stats(ctx, running)
	}
	now := m.now()
	var samples []store.Sample
	var accruals []store.Accrual
	seen := make(map[string]bool, len(sbs))
	spent := make(map[string]float64, len(sbs))
	for _, sb := range sbs {
		seen[sb.ID] = true
		ms, err := m.stateOf(ctx, sb.ID)
		if err != nil {
			m.log.Error("read meter", "sandbox", sb.ID, "err", err)
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
				if smp, ok := m.sample(ms, sb, st); ok {
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
				mt, err := m.store.GetMeter(ctx, sb.ID)
				if err != nil {
					m.log.Error("read meter", "sandbox", sb.ID, "err", err)
					continue
				}
				ms.stored, ms.storedKnown = mt.StoredBytes, true
			}
			use = metering.Stored(ms.stored, now.Sub(from).Seconds())
		}
		if !now.After(from) {
			continue
		}
		hourly := m.Hourly(sb.ID, sb.TeamID, from, now, use)
		for i := range hourly {
			hourly[i].Cursor = ms.cursor
			if i > 0 {
				hourly[i].Cursor = &hourly[i-1].Until
			}
		}
		accruals = append(accruals, hourly...)
		ms.until = now
		ms.cursor = &hourly[len(hourly)-1].Until
		spent[sb.ID] = sb.CostUSD + use.Cost(m.cfg.Prices)
	}
	m.mu.Lock()
	for id := range m.meters {
		if !seen[id] {
			delete(m.meters, id)
		}
	}
	m.mu.Unlock()
	if err := m.store.AppendSamples(ctx, samples); err != nil {
		m.log.Error("store samples", "samples", len(samples), "err", err)
	}
	if err := m.store.AccrueUsage(ctx, accruals); err != nil {
		// What the store did not take is charged again from its meter:
		// the next tick reads every cursor again. A conflict is a meter
		// on another replica that charged first (a leader that just lost
		// its lease).
		if api.ErrorCode(err) == api.CodeConflict {
			m.log.Warn("accrue usage: another meter charged first; reading the meters again", "err", err)
		} else {
			m.log.Error("accrue usage", "err", err)
		}
		m.mu.Lock()
		clear(m.meters)
		m.mu.Unlock()
		return
	}
	wls := m.life.MeterWorkloads(ctx, now)
	m.checkBudgets(ctx, sbs, spent, wls)
}

// stateOf returns the meter's memory of a sandbox, reading how far it is
// accrued from the store the first time.
func (m *Meter) stateOf(ctx context.Context, id string) (*state, error) {
	m.mu.Lock()
	ms, ok := m.meters[id]
	m.mu.Unlock()
	if ok {
		return ms, nil
	}
	mt, err := m.store.GetMeter(ctx, id)
	if err != nil {
		return nil, err
	}
	ms = &state{cursor: mt.AccruedUntil}
	if mt.AccruedUntil != nil {
		ms.until = *mt.AccruedUntil
	}
	m.mu.Lock()
	m.meters[id] = ms
	m.mu.Unlock()
	return ms, nil
}

// sample makes the sample of a running sandbox from its last reading. A
// sandbox read for the first time since it started counts from its start
// (its cgroup and interface are new), unless the start is long past (the
// server restarted): then this reading is only the base of the next.
func (m *Meter) sample(ms *state, sb api.Sandbox, st node.Stats) (metering.Sample, bool) {
	prev := ms.prev
	if prev == nil || prev.Time.Before(*sb.StartedAt) || st.CPUNanos < prev.CPUNanos {
		if st.Time.Sub(*sb.StartedAt) > 3*m.cfg.Interval {
			return metering.Sample{}, false
		}
		prev = &node.Stats{Time: *sb.StartedAt}
	}
	return metering.Diff(*prev, st)
}

// Hourly splits the use of a sandbox or workload (id) over [from, to)
// into the hours it falls in, priced at the meter's prices.
func (m *Meter) Hourly(id, teamID string, from, to time.Time, use metering.Use) []store.Accrual {
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
			GPUS: u.GPUS, CostUSD: u.Cost(m.cfg.Prices), Until: end,
		})
		t = end
	}
	return out
}
