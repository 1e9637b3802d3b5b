package server_test

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/node"
	"github.com/cove-dev/cove/internal/server"
)

// BenchmarkMeterTick200 is the control plane's share of one meter tick
// over 200 running sandboxes: listing them, 200 samples and their rollups
// and 200 accruals written to SQLite, and the spend-limit checks (every
// sandbox has a limit). The node's share is metering's BenchmarkSample200.
func BenchmarkMeterTick200(b *testing.B) {
	h := newHarnessWith(b, func(c *server.Config) { c.MaxWait = time.Minute })
	c := &clock{t: time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)}
	h.srv.SetClock(c.now)
	ctx := b.Context()
	limit := 1e9
	var ids []string
	for i := range 200 {
		sb, err := h.srv.CreateSandbox(ctx, h.a, api.CreateSandboxRequest{Name: fmt.Sprintf("b%d", i), SpendLimitUSD: &limit})
		if err != nil {
			b.Fatal(err)
		}
		ids = append(ids, sb.ID)
	}
	for _, id := range ids {
		if sb, err := h.srv.WaitSandbox(ctx, h.a, id, api.StateRunning, time.Minute); err != nil || sb.State != api.StateRunning {
			b.Fatalf("%s: %v %v", id, sb.State, err)
		}
	}
	var cpu uint64
	cpu0 := cpuTime()
	for b.Loop() {
		c.add(5 * time.Second)
		cpu += 1e9
		for _, id := range ids {
			h.node.SetStats(id, node.Stats{Time: c.now(), CPUNanos: cpu, MemoryBytes: 1 << 28, MemoryPeakBytes: 1 << 29, DiskBytes: 1 << 30})
		}
		h.srv.MeterOnce(ctx)
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
