package workloads

import (
	"math"
	"testing"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
	cove "github.com/cove-dev/cove/sdk/go"
)

// TestWorkloadUsage: once a CPU workload exits, GET /v1/usage has an item
// keyed by its ID with its cost, and the team's month cost grew by it.
func TestWorkloadUsage(t *testing.T) {
	s := noGPUs(t, e2etest.WithManaged)
	c := s.Admin
	ctx := t.Context()
	before, err := c.Usage(ctx, cove.UsageQuery{})
	if err != nil {
		t.Fatal(err)
	}
	w := submit(t, c, api.CreateWorkloadRequest{Command: "sleep 1", Resources: &api.WorkloadResourcesRequest{}})
	done := waitState(t, c, w.ID, api.WorkloadExited)
	if done.CostUSD <= 0 {
		t.Fatalf("ended workload costs $%v", done.CostUSD)
	}
	after, err := c.Usage(ctx, cove.UsageQuery{GroupBy: "sandbox"})
	if err != nil {
		t.Fatal(err)
	}
	near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }
	var item *api.Usage
	for i := range after.Items {
		if after.Items[i].SandboxID == w.ID {
			item = &after.Items[i]
		}
	}
	if item == nil || !near(item.CostUSD, done.CostUSD) || item.CPUS <= 0 || item.MemoryGiBS <= 0 {
		t.Fatalf("usage items %+v; want %s costing $%v", after.Items, w.ID, done.CostUSD)
	}
	if got := after.MonthCostUSD - before.MonthCostUSD; !near(got, done.CostUSD) {
		t.Errorf("month cost grew by $%v (from $%v to $%v); want $%v", got, before.MonthCostUSD, after.MonthCostUSD, done.CostUSD)
	}
	if after.Total.CostUSD < item.CostUSD {
		t.Errorf("total $%v is less than the workload's $%v", after.Total.CostUSD, item.CostUSD)
	}
}
