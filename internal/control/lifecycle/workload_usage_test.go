package lifecycle_test

import (
	"fmt"
	"github.com/cove-dev/cove/internal/control/meter"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/lifecycle"
	"github.com/cove-dev/cove/internal/id"
)

// TestWorkloadUsage: an ended workload's CPU-, memory- and GPU-seconds
// count in GET /v1/usage (keyed by its ID) and in its team's month, whose
// spend limit then raises budget.exceeded and refuses new workloads.
func TestWorkloadUsage(t *testing.T) {
	h := newHarnessWith(t, func(c *lifecycle.Config) {
		c.Prices = api.Prices{VCPUSecond: 0.01, MemoryGiBSecond: 0.001, GPUSecond: 0.1}
		c.MetricsInterval = 5 * time.Second
	})
	c := &clock{t: time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)}
	h.srv.SetClock(c.now)
	ctx := t.Context()

	// 2 CPUs, 1 GiB and 1 GPU from 10:59:30 to 11:00:30: 60 s over two hours.
	start := time.Date(2026, 3, 1, 10, 59, 30, 0, time.UTC)
	end := start.Add(time.Minute)
	exit := 0
	w := api.Workload{
		ID: "wl_usage1", TeamID: h.a, Template: "managed", Command: "true",
		Resources: api.WorkloadResources{CPUs: 2, MemoryMiB: 1024, GPUs: 1},
		State:     api.WorkloadExited, ExitCode: &exit, CreatedAt: start, StartedAt: &start, EndedAt: &end,
		CostUSD: 60 * (2*0.01 + 0.001 + 0.1),
	}
	if err := h.st.CreateWorkload(ctx, w); err != nil {
		t.Fatal(err)
	}
	c.add(2 * time.Hour)
	h.plane.Workloads.Charge(ctx, w)
	h.plane.Workloads.Charge(ctx, w) // charged once however often it is recorded

	r, err := h.plane.Meter.Usage(ctx, h.a, meter.UsageQuery{GroupBy: "sandbox"})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Items) != 1 || r.Items[0].SandboxID != w.ID {
		t.Fatalf("items = %+v; want one for %s", r.Items, w.ID)
	}
	got := r.Items[0]
	if !near(got.CPUS, 120, 1e-9) || !near(got.MemoryGiBS, 60, 1e-9) || !near(got.GPUS, 60, 1e-9) || !near(got.CostUSD, w.CostUSD, 1e-9) {
		t.Errorf("workload usage = %+v; want 120 cpu_s, 60 memory_gib_s, 60 gpu_s, $%v", got, w.CostUSD)
	}
	if !near(r.Total.CostUSD, w.CostUSD, 1e-9) || !near(r.MonthCostUSD, w.CostUSD, 1e-9) {
		t.Errorf("total $%v, month $%v; want $%v", r.Total.CostUSD, r.MonthCostUSD, w.CostUSD)
	}
	days, err := h.plane.Meter.Usage(ctx, h.a, meter.UsageQuery{GroupBy: "day"})
	if err != nil || len(days.Items) != 1 || !near(days.Items[0].CostUSD, w.CostUSD, 1e-9) {
		t.Errorf("by day = %+v, %v; want one day of $%v", days.Items, err, w.CostUSD)
	}
	if other, err := h.plane.Meter.Usage(ctx, h.b, meter.UsageQuery{}); err != nil || other.MonthCostUSD != 0 {
		t.Errorf("another team's month = %+v, %v; want $0", other, err)
	}

	limit := w.CostUSD / 2
	if _, err := h.plane.Teams.UpdateTeam(ctx, h.admin, h.a, api.UpdateTeamRequest{SpendLimitUSD: &limit}); err != nil {
		t.Fatal(err)
	}
	h.plane.Meter.Tick(ctx)
	if ev := h.events(t, h.a, ""); !slices.Contains(ev, "budget.exceeded") {
		t.Errorf("team events = %v; want budget.exceeded", ev)
	}
	_, err = h.plane.Workloads.SubmitWorkload(ctx, h.a, api.CreateWorkloadRequest{Command: "true"})
	wantCode(t, err, api.CodeBudgetExceeded)
}

// TestWorkloadNeverRanCostsNothing: a workload cancelled in the queue
// leaves no usage.
func TestWorkloadNeverRanCostsNothing(t *testing.T) {
	h := newHarness(t)
	ctx := t.Context()
	now := time.Now().UTC()
	w := api.Workload{ID: "wl_queued1", TeamID: h.a, Template: "managed", State: api.WorkloadCancelled, CreatedAt: now, EndedAt: &now}
	h.plane.Workloads.Charge(ctx, w)
	r, err := h.plane.Meter.Usage(ctx, h.a, meter.UsageQuery{GroupBy: "sandbox"})
	if err != nil || len(r.Items) != 0 || r.MonthCostUSD != 0 {
		t.Errorf("usage = %+v, %v; want none", r, err)
	}
}

// TestWorkloadMeteredWhileRunning: a placed workload is charged on every
// meter tick, from its placement, hour by hour; its end charges only what
// the ticks did not, so its usage is its held time once, equal to its
// cost_usd.
func TestWorkloadMeteredWhileRunning(t *testing.T) {
	h := newHarnessWith(t, func(c *lifecycle.Config) {
		c.Prices = api.Prices{VCPUSecond: 0.01}
	})
	c := &clock{t: time.Date(2026, 3, 1, 11, 0, 0, 0, time.UTC)}
	h.srv.SetClock(c.now)
	ctx := t.Context()
	placed := time.Date(2026, 3, 1, 10, 59, 30, 0, time.UTC)
	started := placed.Add(10 * time.Second)
	w := api.Workload{
		ID: id.New("wl"), TeamID: h.a, Template: "managed", Command: "sleep 600",
		Resources: api.WorkloadResources{CPUs: 1, MemoryMiB: 512},
		State:     api.WorkloadRunning, CreatedAt: placed, PlacedAt: &placed, StartedAt: &started,
	}
	if err := h.st.CreateWorkload(ctx, w); err != nil {
		t.Fatal(err)
	}
	cost := func() float64 {
		t.Helper()
		r, err := h.plane.Meter.Usage(ctx, h.a, meter.UsageQuery{GroupBy: "sandbox"})
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Items) != 1 || !near(r.MonthCostUSD, r.Items[0].CostUSD, 1e-12) {
			t.Fatalf("usage = %+v; want one item, the month's cost", r)
		}
		return r.Items[0].CostUSD
	}
	for _, tick := range []struct {
		at   time.Time
		held float64 // seconds since placement
	}{
		{time.Date(2026, 3, 1, 11, 0, 0, 0, time.UTC), 30},
		{time.Date(2026, 3, 1, 11, 0, 20, 0, time.UTC), 50},
		{time.Date(2026, 3, 1, 11, 0, 20, 0, time.UTC), 50}, // the same tick again: nothing more
		{time.Date(2026, 3, 1, 12, 0, 10, 0, time.UTC), 3640},
	} {
		c.set(tick.at)
		h.plane.Meter.Tick(ctx)
		if got := cost(); !near(got, tick.held*0.01, 1e-9) {
			t.Errorf("at %s: usage $%v; want $%v", tick.at.Format(time.TimeOnly), got, tick.held*0.01)
		}
		cur, err := h.plane.Workloads.GetWorkload(ctx, h.a, w.ID)
		if err != nil || !near(cur.CostUSD, tick.held*0.01, 1e-9) {
			t.Errorf("at %s: workload cost_usd $%v, %v; want $%v", tick.at.Format(time.TimeOnly), cur.CostUSD, err, tick.held*0.01)
		}
	}
	c.set(time.Date(2026, 3, 1, 12, 0, 40, 0, time.UTC))
	done, err := h.plane.Workloads.CancelWorkload(ctx, h.a, w.ID)
	if err != nil {
		t.Fatal(err)
	}
	h.plane.Meter.Tick(ctx) // an ended workload is its end's to charge
	if want := 3670 * 0.01; !near(done.CostUSD, want, 1e-9) || !near(cost(), want, 1e-9) {
		t.Errorf("ended: cost_usd $%v, usage $%v; want both $%v", done.CostUSD, cost(), want)
	}
}

// TestWorkloadAtTeamLimit: at its team's monthly limit a placed workload
// is cancelled, naming the budget, after budget events that name it.
func TestWorkloadAtTeamLimit(t *testing.T) {
	h := newHarnessWith(t, func(c *lifecycle.Config) {
		c.Prices = api.Prices{VCPUSecond: 0.01}
	})
	c := &clock{t: time.Date(2026, 3, 1, 11, 0, 0, 0, time.UTC)}
	h.srv.SetClock(c.now)
	ctx := t.Context()
	placed := c.now()
	w := api.Workload{
		ID: id.New("wl"), TeamID: h.a, Template: "managed", Command: "sleep 600",
		Resources: api.WorkloadResources{CPUs: 1, MemoryMiB: 512},
		State:     api.WorkloadRunning, CreatedAt: placed, PlacedAt: &placed, StartedAt: &placed,
	}
	if err := h.st.CreateWorkload(ctx, w); err != nil {
		t.Fatal(err)
	}
	limit := 1.0 // 100 s
	if _, err := h.plane.Teams.UpdateTeam(ctx, h.admin, h.a, api.UpdateTeamRequest{SpendLimitUSD: &limit}); err != nil {
		t.Fatal(err)
	}
	c.add(60 * time.Second)
	h.plane.Meter.Tick(ctx)
	if cur, _ := h.plane.Workloads.GetWorkload(ctx, h.a, w.ID); cur.State != api.WorkloadRunning {
		t.Fatalf("at 60%% of the limit the workload is %s (%s)", cur.State, cur.StateReason)
	}
	c.add(60 * time.Second)
	h.plane.Meter.Tick(ctx)
	cur, err := h.plane.Workloads.GetWorkload(ctx, h.a, w.ID)
	if err != nil || cur.State != api.WorkloadCancelled || !strings.Contains(cur.StateReason, "spend limit") {
		t.Fatalf("over the limit the workload is %s (%s), %v; want cancelled at the team's spend limit", cur.State, cur.StateReason, err)
	}
	l, err := h.plane.Events.ListEvents(ctx, h.a, lifecycle.EventQuery{Page: lifecycle.Page{Limit: 1000}})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range l.Items {
		if e.Data["workload_id"] == w.ID {
			got = append(got, fmt.Sprint(e.Type, " ", e.Data["scope"], " ", e.Data["threshold_pct"]))
		}
	}
	want := []string{"budget.alert team 50", "budget.alert team 80", "budget.exceeded team <nil>", "workload.cancelled <nil> <nil>"}
	if !slices.Equal(got, want) {
		t.Errorf("events naming the workload %q; want %q", got, want)
	}
}

func (c *clock) set(t time.Time) { c.mu.Lock(); defer c.mu.Unlock(); c.t = t }
