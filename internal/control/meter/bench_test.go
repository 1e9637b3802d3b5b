package meter_test

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/meter"
	"github.com/cove-dev/cove/internal/node"
	"github.com/cove-dev/cove/internal/node/nodetest"
	"github.com/cove-dev/cove/internal/store/sqlite"
)

// BenchmarkMeterTick200 is the control plane's share of one meter tick
// over 200 running sandboxes: listing them, 200 samples and their rollups
// and 200 accruals written to SQLite, and the spend-limit checks (every
// sandbox has a limit). The node's share is metering's BenchmarkSample200.
func BenchmarkMeterTick200(b *testing.B) {
	ctx := b.Context()
	st, err := sqlite.Open(ctx, filepath.Join(b.TempDir(), "cove.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	nd := nodetest.New()
	b.Cleanup(nd.Close)
	var mu sync.Mutex
	now := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	m := meter.New(meter.Config{Prices: prices, Interval: interval, RawRetention: time.Hour, RollupRetention: 24 * time.Hour},
		st, nd, &life{st: st}, clock, slog.New(slog.DiscardHandler))
	if err := st.CreateTeam(ctx, api.Team{ID: "team_a", Name: "a", CreatedAt: now}); err != nil {
		b.Fatal(err)
	}
	limit := 1e9
	var ids []string
	for i := range 200 {
		sb := api.Sandbox{ID: fmt.Sprintf("sbx_%03d", i), TeamID: "team_a", Template: "managed", State: api.StateRunning,
			Resources: api.Resources{CPUs: 1, MemoryMiB: 512, DiskMiB: 1024}, Labels: map[string]string{},
			Network: api.NetworkPolicy{Allow: []string{}}, OnBudget: api.OnBudgetSleep, BudgetAlerts: api.DefaultBudgetAlerts,
			SpendLimitUSD: &limit, CreatedAt: now, StartedAt: &now}
		if err := st.CreateSandbox(ctx, sb); err != nil {
			b.Fatal(err)
		}
		ids = append(ids, sb.ID)
	}
	var cpu uint64
	cpu0 := cpuTime()
	for b.Loop() {
		mu.Lock()
		now = now.Add(interval)
		mu.Unlock()
		cpu += 1e9
		for _, id := range ids {
			nd.SetStats(id, node.Stats{Time: clock(), CPUNanos: cpu, MemoryBytes: 1 << 28, MemoryPeakBytes: 1 << 29, DiskBytes: 1 << 30})
		}
		m.Tick(ctx)
	}
	// CPU time (user and system, the whole process) rather than wall
	// time: on a shared host the wall clock counts other work too.
	cpuNs := float64(cpuTime()-cpu0) / float64(b.N)
	b.ReportMetric(cpuNs, "cpu-ns/op")
	b.ReportMetric(cpuNs/5e9*100, "%cpu@5s")
}

// cpuTime is the CPU time this process used so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
