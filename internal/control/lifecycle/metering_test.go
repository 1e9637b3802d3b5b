package lifecycle_test

import (
	"github.com/cove-dev/cove/internal/control/meter"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/lifecycle"
	"github.com/cove-dev/cove/internal/node"
)

// clock is a fake clock the test moves.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// meterHarness is a harness whose CPU costs $0.01 a second and nothing
// else, on a fake clock, with a 5 s metrics interval.
func meterHarness(t *testing.T) (*harness, *clock) {
	h := newHarnessWith(t, func(c *lifecycle.Config) {
		c.Prices = api.Prices{VCPUSecond: 0.01, StorageGiBHour: 3600 * 0.001} // $0.001 per GiB-second asleep
		c.MetricsInterval = 5 * time.Second
	})
	c := &clock{t: time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)}
	h.srv.SetClock(c.now)
	return h, c
}

func near(got, want, tol float64) bool { return math.Abs(got-want) <= tol }

func TestMeterSamplesAndCosts(t *testing.T) {
	h, c := meterHarness(t)
	ctx := t.Context()
	sb := h.running(t, h.a, "metered")
	created, err := h.srv.GetSandbox(ctx, h.a, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if p := created.PricePerHourUSD; p == nil || !near(p.Running, 36, 1e-9) {
		t.Fatalf("price_per_hour_usd = %+v; want running 36 (1 CPU at $0.01/s)", p)
	}
	start := *sb.StartedAt
	// Half a CPU for 5 s, then a whole one for 5 s.
	for i, cpu := range []uint64{2.5e9, 7.5e9} {
		c.add(5 * time.Second)
		h.node.SetStats(sb.ID, node.Stats{Time: c.now(), CPUNanos: cpu, MemoryBytes: int64(100 << 20 * (i + 1)),
			MemoryPeakBytes: 300 << 20, DiskBytes: 1 << 20, NetInBytes: 1000, NetOutBytes: 500 * uint64(i+1)})
		h.plane.Meter.Tick(ctx)
	}
	m, err := h.plane.Meter.Metrics(ctx, h.a, sb.ID, meter.MetricsQuery{From: start, To: c.now()})
	if err != nil {
		t.Fatal(err)
	}
	if m.StepS != 5 || len(m.Samples) != 2 {
		t.Fatalf("metrics = %+v; want 2 samples at step 5", m)
	}
	if a, b := m.Samples[0], m.Samples[1]; a.CPUMillicores != 500 || b.CPUMillicores != 1000 ||
		b.MemoryBytes != 200<<20 || b.MemoryPeakBytes != 300<<20 || b.NetInBytes != 0 || b.NetOutBytes != 500 {
		t.Errorf("samples = %+v, %+v", a, b)
	}
	got, err := h.srv.GetSandbox(ctx, h.a, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !near(got.CostUSD, 0.1, 1e-9) {
		t.Errorf("cost after 10 s = %v; want 0.1", got.CostUSD)
	}

	// Asleep: no compute, storage of the save (the fake saves 1 GiB).
	h.node.SetFile(sb.ID, "/big", make([]byte, 1<<30))
	if _, err := h.srv.SleepSandbox(ctx, h.a, sb.ID, "test"); err != nil {
		t.Fatal(err)
	}
	h.wait(t, h.a, sb.ID, api.StateAsleep)
	asleepAt := c.now()
	h.plane.Meter.Tick(ctx) // starts the storage meter
	c.add(10 * time.Second)
	h.plane.Meter.Tick(ctx)
	u, err := h.plane.Meter.SandboxUsage(ctx, h.a, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !near(u.CPUS, 10, 1e-9) || !near(u.StorageGiBH, 10.0/3600, 1e-9) || !near(u.CostUSD, 0.1+0.01, 1e-9) {
		t.Errorf("usage = %+v; want 10 cpu_s, 10 GiB-s of storage, $0.11", u)
	}
	m, err = h.plane.Meter.Metrics(ctx, h.a, sb.ID, meter.MetricsQuery{From: start, To: c.now()})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(m.Gaps); n == 0 || m.Gaps[n-1].Reason != "asleep" || m.Gaps[n-1].From.After(asleepAt) {
		t.Errorf("gaps = %+v; want the last one asleep", m.Gaps)
	}

	r, err := h.plane.Meter.Usage(ctx, h.a, meter.UsageQuery{GroupBy: "sandbox"})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Items) != 1 || r.Items[0].SandboxID != sb.ID || !near(r.Total.CostUSD, 0.11, 1e-9) {
		t.Errorf("usage report = %+v", r)
	}
}

func TestSpendLimit(t *testing.T) {
	h, c := meterHarness(t)
	ctx := t.Context()
	limit := 1.0 // 100 s of CPU
	sb, err := h.srv.CreateSandbox(ctx, h.a, api.CreateSandboxRequest{Name: "capped", SpendLimitUSD: &limit})
	if err != nil {
		t.Fatal(err)
	}
	h.wait(t, h.a, sb.ID, api.StateRunning)
	for range 21 { // 105 s
		c.add(5 * time.Second)
		h.plane.Meter.Tick(ctx)
	}
	h.wait(t, h.a, sb.ID, api.StateAsleep)
	var budget []string
	for _, e := range h.events(t, h.a, sb.ID) {
		if e == "budget.alert" || e == "budget.exceeded" {
			budget = append(budget, e)
		}
	}
	if want := []string{"budget.alert", "budget.alert", "budget.exceeded"}; !slices.Equal(budget, want) {
		t.Errorf("budget events = %v; want %v", budget, want)
	}
	_, err = h.plane.Commands.Exec(ctx, h.a, sb.ID, true, api.CreateCommandRequest{Command: "true"})
	wantCode(t, err, api.CodeBudgetExceeded)
	_, err = h.srv.WakeSandbox(ctx, h.a, sb.ID)
	wantCode(t, err, api.CodeBudgetExceeded)

	more := 5.0
	if _, err := h.srv.UpdateSandbox(ctx, h.a, sb.ID, api.UpdateSandboxRequest{SpendLimitUSD: &more}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.srv.WakeSandbox(ctx, h.a, sb.ID); err != nil {
		t.Fatalf("wake after raising the limit: %v", err)
	}
	h.wait(t, h.a, sb.ID, api.StateRunning)
}

func TestTeamSpendLimit(t *testing.T) {
	h, c := meterHarness(t)
	ctx := t.Context()
	admin := h.admin
	limit := 0.2
	if _, err := h.plane.Teams.UpdateTeam(ctx, admin, h.a, api.UpdateTeamRequest{SpendLimitUSD: &limit}); err != nil {
		t.Fatal(err)
	}
	_, err := h.plane.Teams.UpdateTeam(ctx, lifecycle.Principal{Team: api.Team{ID: h.b, Name: "team-b"}}, h.a, api.UpdateTeamRequest{SpendLimitUSD: &limit})
	wantCode(t, err, api.CodePermissionDenied)

	sb := h.running(t, h.a, "team-capped")
	for range 5 { // 25 s: $0.25
		c.add(5 * time.Second)
		h.plane.Meter.Tick(ctx)
	}
	h.wait(t, h.a, sb.ID, api.StateAsleep)
	_, err = h.srv.CreateSandbox(ctx, h.a, api.CreateSandboxRequest{})
	wantCode(t, err, api.CodeBudgetExceeded)
	if _, err := h.srv.CreateSandbox(ctx, h.b, api.CreateSandboxRequest{}); err != nil {
		t.Errorf("another team's create: %v", err)
	}
	none := -1.0
	if _, err := h.plane.Teams.UpdateTeam(ctx, admin, h.a, api.UpdateTeamRequest{SpendLimitUSD: &none}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.srv.CreateSandbox(ctx, h.a, api.CreateSandboxRequest{}); err != nil {
		t.Errorf("create once the limit is gone: %v", err)
	}
}

func TestEgressCharged(t *testing.T) {
	h := newHarnessWith(t, func(c *lifecycle.Config) {
		c.Prices = api.Prices{EgressGB: 0.5}
	})
	c := &clock{t: time.Date(2026, 3, 1, 10, 59, 58, 0, time.UTC)}
	h.srv.SetClock(c.now)
	ctx := t.Context()
	sb := h.running(t, h.a, "talker")
	// 2 GB out over two ticks, the second across an hour boundary.
	for i, out := range []uint64{1e9, 2e9} {
		c.add(3 * time.Second)
		h.node.SetStats(sb.ID, node.Stats{Time: c.now(), CPUNanos: uint64(i), NetInBytes: 10, NetOutBytes: out})
		h.plane.Meter.Tick(ctx)
	}
	u, err := h.plane.Meter.SandboxUsage(ctx, h.a, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if u.EgressBytes != 2e9 || !near(u.CostUSD, 1, 1e-9) {
		t.Errorf("usage = %+v; want 2e9 egress bytes for $1", u)
	}
	r, err := h.plane.Meter.Usage(ctx, h.a, meter.UsageQuery{From: c.now().Add(-time.Hour), GroupBy: "day"})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Items) != 1 || r.Items[0].EgressBytes != 2e9 {
		t.Errorf("by day: %+v", r.Items)
	}
}
