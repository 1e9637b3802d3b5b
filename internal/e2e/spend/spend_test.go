// Package spend runs `cove serve` with a test price table and a short
// metrics interval: costs follow time and price, sleep turns compute
// charges into storage charges, and spend limits alert, stop the sandbox
// and refuse work until they are raised.
package spend

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
	cove "github.com/cove-dev/cove/sdk/go"
)

func TestMain(m *testing.M) { e2etest.Main(m) }

const interval = 500 * time.Millisecond

// server runs cove serve with prices: one CPU costs cpuPrice a second,
// a GiB stored storagePrice a second, nothing else.
func server(t *testing.T, cpuPrice, storagePrice float64) *e2etest.Server {
	t.Helper()
	e2etest.RequireRoot(t)
	file := filepath.Join(t.TempDir(), "prices.json")
	b := []byte(`{"vcpu_second_usd": ` + ftoa(cpuPrice) + `, "memory_gib_second_usd": 0, "storage_gib_hour_usd": ` +
		ftoa(storagePrice*3600) + `, "egress_gb_usd": 0}`)
	if err := os.WriteFile(file, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return e2etest.StartServer(t, e2etest.WithArgs("--warm-pool", "0", "--metrics-interval", interval.String(), "--prices", file))
}

func ftoa(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

func wait(t *testing.T, c *cove.Client, ref string, state api.SandboxState) api.Sandbox {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	sb, err := c.WaitSandbox(ctx, ref, state, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if sb.State != state {
		t.Fatalf("sandbox %s is %s (%s); want %s", ref, sb.State, sb.StateReason, state)
	}
	return sb
}

func TestCostFollowsPrices(t *testing.T) {
	const price = 0.001 // per CPU-second
	s := server(t, price, 1)
	c := s.Admin
	cpus := 2.0
	sb := e2etest.Create(t, c, api.CreateSandboxRequest{Resources: &api.ResourcesRequest{CPUs: &cpus}})
	if p := sb.PricePerHourUSD; p == nil || p.Running != 2*price*3600 {
		t.Fatalf("price_per_hour_usd = %+v; want running %v", p, 2*price*3600)
	}
	time.Sleep(5 * time.Second)
	// On a busy host a tick may come late: a reading more than one
	// interval behind is read again (a few times); a wrong price or a
	// charge for time that did not pass fails every reading.
	for attempt := 1; ; attempt++ {
		got, err := c.GetSandbox(t.Context(), sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		running := time.Since(*got.StartedAt).Seconds()
		want := running * cpus * price
		t.Logf("after %.2fs running: cost $%.6f, time × price $%.6f", running, got.CostUSD, want)
		if got.CostUSD > want*1.02 {
			t.Fatalf("cost $%.6f is more than 2%% above time × price $%.6f", got.CostUSD, want)
		}
		if got.CostUSD >= (want-interval.Seconds()*cpus*price)*0.98 {
			break
		}
		if attempt == 5 {
			t.Fatalf("cost $%.6f; want within 2%% (and one interval behind) of $%.6f", got.CostUSD, want)
		}
		time.Sleep(interval / 3)
	}

	if _, err := c.SleepSandbox(t.Context(), sb.ID); err != nil {
		t.Fatal(err)
	}
	wait(t, c, sb.ID, api.StateAsleep)
	u1, err := c.SandboxUsage(t.Context(), sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * interval)
	u2, err := c.SandboxUsage(t.Context(), sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("asleep: cpu_s %.3f → %.3f, storage_gib_h %.9f → %.9f, cost $%.6f → $%.6f", u1.CPUS, u2.CPUS, u1.StorageGiBH, u2.StorageGiBH, u1.CostUSD, u2.CostUSD)
	if u2.CPUS != u1.CPUS || u2.MemoryGiBS != u1.MemoryGiBS {
		t.Errorf("compute charged while asleep: cpu_s %v → %v", u1.CPUS, u2.CPUS)
	}
	if !(u2.StorageGiBH > u1.StorageGiBH) || !(u2.CostUSD > u1.CostUSD) {
		t.Errorf("no storage charged while asleep: storage_gib_h %v → %v", u1.StorageGiBH, u2.StorageGiBH)
	}
	r, err := c.Usage(t.Context(), cove.UsageQuery{GroupBy: "sandbox"})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Items) != 1 || r.Items[0].SandboxID != sb.ID || r.Total.CostUSD < u2.CostUSD {
		t.Errorf("usage report %+v", r)
	}
}

// budgetEvents lists the budget events of a sandbox ("" for the team's).
func budgetEvents(t *testing.T, c *cove.Client, sandbox string) []api.Event {
	t.Helper()
	l, err := c.Events(t.Context(), cove.EventQuery{Sandbox: sandbox, Types: []string{"budget.alert", "budget.exceeded"}, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	return l.Items
}

func TestSandboxSpendLimit(t *testing.T) {
	s := server(t, 0.01, 0) // a CPU costs a cent a second
	c := s.Admin
	limit := 0.05 // about 5 s
	sb := e2etest.Create(t, c, api.CreateSandboxRequest{SpendLimitUSD: &limit})
	asleep := wait(t, c, sb.ID, api.StateAsleep)
	t.Logf("asleep (%s) at $%.4f of a $%.2f limit: overshoot $%.4f (one interval is $%.4f)",
		asleep.StateReason, asleep.CostUSD, limit, asleep.CostUSD-limit, interval.Seconds()*0.01)
	var got []string
	for _, e := range budgetEvents(t, c, sb.ID) {
		if e.Type == "budget.alert" {
			got = append(got, e.Type+" "+ftoa(e.Data["threshold_pct"].(float64)))
		} else {
			got = append(got, e.Type)
		}
	}
	if want := []string{"budget.alert 50", "budget.alert 80", "budget.exceeded"}; !slices.Equal(got, want) {
		t.Errorf("budget events %v; want %v", got, want)
	}

	_, err := c.Exec(t.Context(), sb.ID, api.CreateCommandRequest{Command: "true"})
	if api.ErrorCode(err) != api.CodeBudgetExceeded {
		t.Errorf("a command over the limit: %v; want budget_exceeded", err)
	}
	code, er, body := e2etest.RawRequest(t, "POST", s.URL+"/v1/sandboxes/"+sb.ID+"/wake", s.AdminKey, "")
	if code != 402 || er.Error == nil || er.Error.Code != api.CodeBudgetExceeded {
		t.Errorf("wake over the limit: %d %s; want 402 budget_exceeded", code, body)
	}

	more := 10.0
	if _, err := c.UpdateSandbox(t.Context(), sb.ID, api.UpdateSandboxRequest{SpendLimitUSD: &more}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WakeSandbox(t.Context(), sb.ID); err != nil {
		t.Fatalf("wake after raising the limit: %v", err)
	}
	wait(t, c, sb.ID, api.StateRunning)
	e2etest.MustOK(t, c, sb.ID, "true")
	if n := len(budgetEvents(t, c, sb.ID)); n != 3 {
		t.Errorf("%d budget events after raising the limit; want still 3", n)
	}
}

func TestTeamSpendLimit(t *testing.T) {
	s := server(t, 0.01, 0)
	team := s.NewTeam("capped")
	sb := e2etest.Create(t, team, api.CreateSandboxRequest{})
	teams, err := listTeams(t, s)
	if err != nil {
		t.Fatal(err)
	}
	limit := 0.03
	if _, err := s.Admin.UpdateTeam(t.Context(), teams["capped"], api.UpdateTeamRequest{SpendLimitUSD: &limit}); err != nil {
		t.Fatal(err)
	}
	_, err = team.UpdateTeam(t.Context(), teams["capped"], api.UpdateTeamRequest{SpendLimitUSD: &limit})
	if api.ErrorCode(err) != api.CodePermissionDenied {
		t.Errorf("a team changing its own limit: %v; want permission_denied", err)
	}
	wait(t, team, sb.ID, api.StateAsleep)
	_, err = team.CreateSandbox(t.Context(), api.CreateSandboxRequest{}, false)
	if api.ErrorCode(err) != api.CodeBudgetExceeded {
		t.Fatalf("create over the team's limit: %v; want budget_exceeded", err)
	}
	var types []string
	for _, e := range budgetEvents(t, team, "") {
		types = append(types, e.Type)
	}
	if !slices.Contains(types, "budget.exceeded") {
		t.Errorf("team budget events %v; want budget.exceeded", types)
	}
	r, err := team.Usage(t.Context(), cove.UsageQuery{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("team spent $%.4f this month of a $%.2f limit", r.MonthCostUSD, limit)
	if r.SpendLimitUSD == nil || *r.SpendLimitUSD != limit || r.MonthCostUSD < limit {
		t.Errorf("usage report %+v", r)
	}
}

// listTeams maps team names to IDs.
func listTeams(t *testing.T, s *e2etest.Server) (map[string]string, error) {
	code, _, body := e2etest.RawRequest(t, "GET", s.URL+"/v1/teams", s.AdminKey, "")
	if code != 200 {
		t.Fatalf("list teams: %d %s", code, body)
	}
	var l struct {
		Items []api.Team `json:"items"`
	}
	if err := json.Unmarshal(body, &l); err != nil {
		return nil, err
	}
	m := map[string]string{}
	for _, tm := range l.Items {
		m[tm.Name] = tm.ID
	}
	return m, nil
}

// TestCostAcrossRestart: sandboxes run on while `cove serve` is down; the
// meter's progress is in the store, so the next start charges the time it
// was down, once.
func TestCostAcrossRestart(t *testing.T) {
	const price = 0.001
	s := server(t, price, 0)
	c := s.Admin
	sb := e2etest.Create(t, c, api.CreateSandboxRequest{})
	time.Sleep(2 * time.Second)
	s.Stop(syscall.SIGKILL)
	time.Sleep(3 * time.Second)
	s.Start()
	deadline := time.Now().Add(time.Minute)
	for {
		got, err := c.GetSandbox(t.Context(), sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		running := time.Since(*got.StartedAt).Seconds()
		want := running * price
		if got.CostUSD >= (want-interval.Seconds()*price)*0.98 || time.Now().After(deadline) {
			t.Logf("after %.2fs (3 s of them with the server down): cost $%.6f, time × price $%.6f", running, got.CostUSD, want)
			if got.CostUSD > want*1.02 || got.CostUSD < (want-interval.Seconds()*price)*0.98 {
				t.Errorf("cost $%.6f; want within 2%% (and one interval behind) of $%.6f", got.CostUSD, want)
			}
			return
		}
		time.Sleep(interval)
	}
}
