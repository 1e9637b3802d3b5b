package server_test

import (
	"fmt"
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
	for b.Loop() {
		c.add(5 * time.Second)
		cpu += 1e9
		for _, id := range ids {
			h.node.SetStats(id, node.Stats{Time: c.now(), CPUNanos: cpu, MemoryBytes: 1 << 28, MemoryPeakBytes: 1 << 29, DiskBytes: 1 << 30})
		}
		h.srv.MeterOnce(ctx)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/5e9*100, "%cpu@5s")
}
