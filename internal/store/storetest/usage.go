package storetest

import (
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/store"
)

// usageFixture makes team_a with sandboxes sbx_1 and sbx_2 and team_b with
// sbx_3.
func usageFixture(t *testing.T, s store.Store) {
	t.Helper()
	ctx := t.Context()
	mustDo(t, s.CreateTeam(ctx, api.Team{ID: "team_a", Name: "alpha", CreatedAt: at(0)}))
	mustDo(t, s.CreateTeam(ctx, api.Team{ID: "team_b", Name: "beta", CreatedAt: at(0)}))
	for _, sb := range []api.Sandbox{
		{ID: "sbx_1", TeamID: "team_a", State: api.StateRunning, CreatedAt: at(1)},
		{ID: "sbx_2", TeamID: "team_a", State: api.StateRunning, CreatedAt: at(2)},
		{ID: "sbx_3", TeamID: "team_b", State: api.StateRunning, CreatedAt: at(3)},
	} {
		mustDo(t, s.CreateSandbox(ctx, sb))
	}
}

func testSamples(t *testing.T, s store.Store) {
	ctx := t.Context()
	usageFixture(t, s)
	base := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	var in []store.Sample
	for i := range 30 { // every 5 s for 150 s: minutes 12:00, 12:01, 12:02
		in = append(in, store.Sample{
			SandboxID: "sbx_1", Time: base.Add(time.Duration(i*5) * time.Second),
			CPUMillicores: int64(i * 10), MemoryBytes: int64(1000 + i), MemoryPeakBytes: int64(2000 + i),
			DiskBytes: 4096, NetInBytes: 1, NetOutBytes: 2,
		})
	}
	in = append(in, store.Sample{SandboxID: "sbx_2", Time: base, CPUMillicores: 999})
	mustDo(t, s.AppendSamples(ctx, in))

	got := mustGet[[]store.Sample](t)(s.ListSamples(ctx, "sbx_1", base, base.Add(time.Minute), 0))
	diff(t, "samples in (12:00, 12:01]", in[1:13], got)
	got = mustGet[[]store.Sample](t)(s.ListSamples(ctx, "sbx_1", base.Add(-time.Second), base.Add(time.Hour), 5))
	diff(t, "first 5 samples", in[:5], got)

	mins := mustGet[[]store.Minute](t)(s.ListMinutes(ctx, "sbx_1", base, base.Add(time.Hour), 0))
	if len(mins) != 3 {
		t.Fatalf("got %d minutes; want 3", len(mins))
	}
	want := store.Minute{SandboxID: "sbx_1", Minute: base, N: 12, CPUMax: 110, MemoryMax: 1011, MemoryPeakMax: 2011,
		DiskSum: 12 * 4096, DiskMax: 4096, NetInBytes: 12, NetOutBytes: 24}
	for i := range 12 {
		want.CPUSum += int64(i * 10)
		want.MemorySum += int64(1000 + i)
	}
	diff(t, "minute 12:00", want, mins[0])
	if mins[2].N != 6 {
		t.Errorf("minute 12:02 has %d samples; want 6", mins[2].N)
	}

	// Raw samples go after a day, rollups later: each by its own cutoff.
	mustDo(t, s.DeleteSamplesBefore(ctx, base.Add(time.Minute), base.Add(time.Minute)))
	got = mustGet[[]store.Sample](t)(s.ListSamples(ctx, "sbx_1", base.Add(-time.Hour), base.Add(time.Hour), 0))
	if len(got) != 18 || !got[0].Time.Equal(base.Add(time.Minute)) {
		t.Errorf("after expiry: %d samples from %v; want 18 from 12:01", len(got), got[0].Time)
	}
	mins = mustGet[[]store.Minute](t)(s.ListMinutes(ctx, "sbx_1", base.Add(-time.Hour), base.Add(time.Hour), 0))
	if len(mins) != 2 {
		t.Errorf("after expiry: %d minutes; want 2", len(mins))
	}
	if got := mustGet[[]store.Sample](t)(s.ListSamples(ctx, "sbx_2", base.Add(-time.Hour), base.Add(time.Hour), 0)); len(got) != 0 {
		t.Errorf("sbx_2 kept %d samples older than the cutoff", len(got))
	}
}

func testUsage(t *testing.T, s store.Store) {
	ctx := t.Context()
	usageFixture(t, s)
	h := time.Date(2025, 3, 1, 23, 0, 0, 0, time.UTC)
	m := mustGet[store.Meter](t)(s.GetMeter(ctx, "sbx_1"))
	diff(t, "meter never used", store.Meter{}, m)

	mustDo(t, s.AccrueUsage(ctx, []store.Accrual{
		{SandboxID: "sbx_1", TeamID: "team_a", Hour: h, CPUS: 10, MemoryGiBS: 5, EgressBytes: 100, CostUSD: 0.5, Until: h.Add(10 * time.Second)},
		{SandboxID: "sbx_1", TeamID: "team_a", Hour: h, CPUS: 10, MemoryGiBS: 5, CostUSD: 0.25, Until: h.Add(20 * time.Second), Cursor: ptr(h.Add(10 * time.Second))},
		{SandboxID: "sbx_1", TeamID: "team_a", Hour: h.Add(time.Hour), StorageGiBH: 2, CostUSD: 0.125, Until: h.Add(time.Hour), Cursor: ptr(h.Add(20 * time.Second))},
		{SandboxID: "sbx_2", TeamID: "team_a", Hour: h, CPUS: 1, CostUSD: 1, Until: h.Add(time.Second)},
		{SandboxID: "sbx_3", TeamID: "team_b", Hour: h, CPUS: 7, CostUSD: 7, Until: h.Add(time.Second)},
	}))
	until := h.Add(time.Hour)
	diff(t, "meter", store.Meter{AccruedUntil: &until}, mustGet[store.Meter](t)(s.GetMeter(ctx, "sbx_1")))
	mustDo(t, s.SetStoredBytes(ctx, "sbx_1", 12345))
	diff(t, "meter with a save", store.Meter{AccruedUntil: &until, StoredBytes: 12345}, mustGet[store.Meter](t)(s.GetMeter(ctx, "sbx_1")))

	sb := mustGet[api.Sandbox](t)(s.GetSandbox(ctx, "team_a", "sbx_1"))
	if sb.CostUSD != 0.875 {
		t.Errorf("cost_usd = %v; want 0.875", sb.CostUSD)
	}
	sb.CostUSD = 99 // not the update's to change
	sb.State = api.StateAsleep
	mustDo(t, s.UpdateSandbox(ctx, sb))
	if sb = mustGet[api.Sandbox](t)(s.GetSandbox(ctx, "team_a", "sbx_1")); sb.CostUSD != 0.875 {
		t.Errorf("cost_usd after an update = %v; want 0.875 still", sb.CostUSD)
	}

	total := mustGet[[]api.Usage](t)(s.SumUsage(ctx, store.UsageFilter{TeamID: "team_a"}))
	diff(t, "team total", []api.Usage{{CPUS: 21, MemoryGiBS: 10, StorageGiBH: 2, EgressBytes: 100, CostUSD: 1.875}}, total)
	days := mustGet[[]api.Usage](t)(s.SumUsage(ctx, store.UsageFilter{TeamID: "team_a", GroupBy: "day"}))
	diff(t, "by day", []api.Usage{
		{Day: "2025-03-01", CPUS: 21, MemoryGiBS: 10, EgressBytes: 100, CostUSD: 1.75},
		{Day: "2025-03-02", StorageGiBH: 2, CostUSD: 0.125},
	}, days)
	bySandbox := mustGet[[]api.Usage](t)(s.SumUsage(ctx, store.UsageFilter{TeamID: "team_a", GroupBy: "sandbox", From: h, To: h.Add(time.Hour)}))
	diff(t, "by sandbox in one hour", []api.Usage{
		{SandboxID: "sbx_1", CPUS: 20, MemoryGiBS: 10, EgressBytes: 100, CostUSD: 0.75},
		{SandboxID: "sbx_2", CPUS: 1, CostUSD: 1},
	}, bySandbox)
	one := mustGet[[]api.Usage](t)(s.SumUsage(ctx, store.UsageFilter{TeamID: "team_a", SandboxID: "sbx_3"}))
	diff(t, "another team's sandbox", []api.Usage{{}}, one)
	_, err := s.SumUsage(ctx, store.UsageFilter{TeamID: "team_a", GroupBy: "week"})
	wantCode(t, err, api.CodeInvalidArgument)

	wantCode(t, s.AccrueUsage(ctx, []store.Accrual{{SandboxID: "sbx_missing", TeamID: "team_a", Hour: h, Until: h}}), api.CodeNotFound)
}

func testBudgets(t *testing.T, s store.Store) {
	ctx := t.Context()
	usageFixture(t, s)
	b := mustGet[store.BudgetState](t)(s.GetBudgetState(ctx, "sbx_1"))
	diff(t, "unknown budget", store.BudgetState{Key: "sbx_1", Alerted: []float64{}}, b)
	b.Alerted, b.Exceeded = []float64{50, 80}, true
	mustDo(t, s.PutBudgetState(ctx, b))
	diff(t, "budget", b, mustGet[store.BudgetState](t)(s.GetBudgetState(ctx, "sbx_1")))
	b.Alerted, b.Exceeded = nil, false
	mustDo(t, s.PutBudgetState(ctx, b))
	diff(t, "budget re-armed", store.BudgetState{Key: "sbx_1", Alerted: []float64{}}, mustGet[store.BudgetState](t)(s.GetBudgetState(ctx, "sbx_1")))

	team := mustGet[api.Team](t)(s.GetTeam(ctx, "team_a"))
	team.SpendLimitUSD, team.BudgetAlerts = ptr(12.5), []float64{10, 90}
	team.Admission.Preview = true
	mustDo(t, s.UpdateTeam(ctx, team))
	diff(t, "updated team", team, mustGet[api.Team](t)(s.GetTeam(ctx, "team_a")))
	team.SpendLimitUSD = nil
	mustDo(t, s.UpdateTeam(ctx, team))
	diff(t, "team without a limit", team, mustGet[api.Team](t)(s.GetTeam(ctx, "team_a")))
	team.ID = "team_missing"
	wantCode(t, s.UpdateTeam(ctx, team), api.CodeNotFound)
}
