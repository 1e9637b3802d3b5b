package storetest

import (
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/store"
)

// testWorkloadUsage: a workload's usage sums with its team's sandboxes',
// keyed by the workload's ID, and putting it again counts it once.
func testWorkloadUsage(t *testing.T, s store.Store) {
	ctx := t.Context()
	usageFixture(t, s)
	h := time.Date(2025, 3, 1, 23, 0, 0, 0, time.UTC)
	mustDo(t, s.AccrueUsage(ctx, []store.Accrual{
		{SandboxID: "sbx_1", TeamID: "team_a", Hour: h, CPUS: 10, CostUSD: 0.5, Until: h.Add(10 * time.Second)},
	}))
	wl := []store.Accrual{
		{SandboxID: "wl_1", TeamID: "team_a", Hour: h.Add(30 * time.Minute), CPUS: 4, MemoryGiBS: 2, GPUS: 2, CostUSD: 0.25},
		{SandboxID: "wl_1", TeamID: "team_a", Hour: h.Add(time.Hour), CPUS: 2, MemoryGiBS: 1, GPUS: 1, CostUSD: 0.125},
		{SandboxID: "wl_2", TeamID: "team_b", Hour: h, CPUS: 8, CostUSD: 4},
	}
	mustDo(t, s.PutWorkloadUsage(ctx, wl))
	mustDo(t, s.PutWorkloadUsage(ctx, wl[:2])) // again: counted once

	total := mustGet[[]api.Usage](t)(s.SumUsage(ctx, store.UsageFilter{TeamID: "team_a"}))
	diff(t, "team total", []api.Usage{{CPUS: 16, MemoryGiBS: 3, GPUS: 3, CostUSD: 0.875}}, total)
	by := mustGet[[]api.Usage](t)(s.SumUsage(ctx, store.UsageFilter{TeamID: "team_a", GroupBy: "sandbox"}))
	diff(t, "by sandbox", []api.Usage{
		{SandboxID: "sbx_1", CPUS: 10, CostUSD: 0.5},
		{SandboxID: "wl_1", CPUS: 6, MemoryGiBS: 3, GPUS: 3, CostUSD: 0.375},
	}, by)
	month := mustGet[[]api.Usage](t)(s.SumUsage(ctx, store.UsageFilter{TeamID: "team_a", From: h.Add(time.Hour)}))
	diff(t, "from the next hour", []api.Usage{{CPUS: 2, MemoryGiBS: 1, GPUS: 1, CostUSD: 0.125}}, month)
	one := mustGet[[]api.Usage](t)(s.SumUsage(ctx, store.UsageFilter{TeamID: "team_a", SandboxID: "wl_2"}))
	diff(t, "another team's workload", []api.Usage{{}}, one)
	// A sandbox's meter knows nothing of workloads.
	diff(t, "sandbox cost", 0.5, mustGet[api.Sandbox](t)(s.GetSandbox(ctx, "team_a", "sbx_1")).CostUSD)

	wantCode(t, s.PutWorkloadUsage(ctx, []store.Accrual{{SandboxID: "wl_3", Hour: h}}), api.CodeInvalidArgument)
}
