package spend

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
	cove "github.com/cove-dev/cove/sdk/go"
)

// pricedServer is server with more serve flags: a CPU costs cpuPrice a
// second, nothing else costs anything.
func pricedServer(t *testing.T, cpuPrice float64, args ...string) *e2etest.Server {
	t.Helper()
	e2etest.RequireRoot(t)
	file := filepath.Join(t.TempDir(), "prices.json")
	b := []byte(`{"vcpu_second_usd": ` + ftoa(cpuPrice) + `, "memory_gib_second_usd": 0, "storage_gib_hour_usd": 0, "egress_gb_usd": 0}`)
	if err := os.WriteFile(file, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return e2etest.StartServer(t, e2etest.WithArgs(append([]string{"--warm-pool", "0", "--metrics-interval", interval.String(),
		"--prices", file, "--cdi-spec-dirs", t.TempDir()}, args...)...))
}

// tenant makes a team and returns its client, its API key and its ID.
func tenant(t *testing.T, s *e2etest.Server, name string) (*cove.Client, string, string) {
	t.Helper()
	c := s.NewTeam(name)
	keys := s.Keys()
	teams, err := listTeams(t, s)
	if err != nil {
		t.Fatal(err)
	}
	return c, keys[len(keys)-1], teams[name]
}

// waitFor polls cond until it holds, for at most a minute.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within a minute", what)
		}
		time.Sleep(interval / 2)
	}
}

// usageItem is the usage report's item of a sandbox or workload (by ID).
func usageItem(t *testing.T, c *cove.Client, id string) (api.Usage, api.UsageReport) {
	t.Helper()
	r, err := c.Usage(t.Context(), cove.UsageQuery{GroupBy: "sandbox"})
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range r.Items {
		if u.SandboxID == id {
			return u, r
		}
	}
	return api.Usage{}, r
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

// TestSetupMetered: a tenant's setup runs `sleep 600` (up to its timeout,
// at any size). It is charged as running time, shows in GET /v1/usage,
// and a spend limit or max_lifetime_s reached during it fails the
// sandbox, saying which limit (a sandbox in setup cannot sleep).
func TestSetupMetered(t *testing.T) {
	s := pricedServer(t, 0.01) // a CPU costs a cent a second
	c, _, _ := tenant(t, s, "setup-tenant")

	t.Run("spend_limit", func(t *testing.T) {
		limit := 0.03 // about 3 s of setup
		sb, err := c.CreateSandbox(t.Context(), api.CreateSandboxRequest{
			SpendLimitUSD: &limit, Setup: &api.Setup{Command: "sleep 600", TimeoutS: 3600},
		}, false)
		if err != nil {
			t.Fatal(err)
		}
		wait(t, c, sb.ID, api.StateSettingUp)
		waitFor(t, "setup cost in GET /v1/usage", func() bool {
			u, _ := usageItem(t, c, sb.ID)
			return u.CostUSD > 0
		})
		failed := waitSandbox(t, c, sb.ID, api.StateFailed)
		t.Logf("failed at $%.4f of a $%.2f limit: %s", failed.CostUSD, limit, failed.StateReason)
		if !strings.Contains(failed.StateReason, "spend limit") || !strings.Contains(failed.StateReason, "setup") {
			t.Errorf("state_reason %q; want it to name the spend limit reached during setup", failed.StateReason)
		}
		if failed.CostUSD < limit {
			t.Errorf("failed at $%v, under its $%v limit", failed.CostUSD, limit)
		}
		var types []string
		for _, e := range budgetEvents(t, c, sb.ID) {
			types = append(types, e.Type)
		}
		if !slices.Contains(types, "budget.exceeded") {
			t.Errorf("budget events %v; want budget.exceeded", types)
		}
		// A tick that began before the failure may still land: compare
		// the usage item with the sandbox's cost once both stand still.
		for attempt := 1; ; attempt++ {
			u, _ := usageItem(t, c, sb.ID)
			cur, err := c.GetSandbox(t.Context(), sb.ID)
			if err != nil {
				t.Fatal(err)
			}
			if near(u.CostUSD, cur.CostUSD) && u.CostUSD >= limit {
				break
			}
			if attempt == 10 {
				t.Fatalf("usage item costs $%v; want the sandbox's $%v (at least the limit)", u.CostUSD, cur.CostUSD)
			}
			time.Sleep(interval)
		}
	})

	t.Run("max_lifetime", func(t *testing.T) {
		lifetime := int64(2)
		sb, err := c.CreateSandbox(t.Context(), api.CreateSandboxRequest{
			MaxLifetimeS: &lifetime, Setup: &api.Setup{Command: "sleep 600", TimeoutS: 3600},
		}, false)
		if err != nil {
			t.Fatal(err)
		}
		failed := waitSandbox(t, c, sb.ID, api.StateFailed)
		if !strings.Contains(failed.StateReason, "max_lifetime_s") || !strings.Contains(failed.StateReason, "setup") {
			t.Errorf("state_reason %q; want it to name max_lifetime_s reached during setup", failed.StateReason)
		}
		l, err := c.Events(t.Context(), cove.EventQuery{Sandbox: sb.ID, Types: []string{"sandbox.expired"}, Limit: 10})
		if err != nil || len(l.Items) != 1 {
			t.Errorf("sandbox.expired events %+v, %v; want one", l.Items, err)
		}
	})
}

// TestSetupAtTeamLimit: a tenant's setup counts in its team's monthly
// spend; at the team's limit it fails, naming that limit.
func TestSetupAtTeamLimit(t *testing.T) {
	s := pricedServer(t, 0.01)
	c, _, teamID := tenant(t, s, "setup-team")
	limit := 0.03
	if _, err := s.Admin.UpdateTeam(t.Context(), teamID, api.UpdateTeamRequest{SpendLimitUSD: &limit}); err != nil {
		t.Fatal(err)
	}
	sb, err := c.CreateSandbox(t.Context(), api.CreateSandboxRequest{Setup: &api.Setup{Command: "sleep 600", TimeoutS: 3600}}, false)
	if err != nil {
		t.Fatal(err)
	}
	failed := waitSandbox(t, c, sb.ID, api.StateFailed)
	if !strings.Contains(failed.StateReason, "team's monthly spend limit") || !strings.Contains(failed.StateReason, "setup") {
		t.Errorf("state_reason %q; want it to name the team's limit reached during setup", failed.StateReason)
	}
	if r, err := c.Usage(t.Context(), cove.UsageQuery{}); err != nil || r.MonthCostUSD < limit {
		t.Errorf("team usage %+v, %v; want the month at its $%v limit", r, err, limit)
	}
}

// waitSandbox waits (at most a minute) for a sandbox to reach state.
func waitSandbox(t *testing.T, c *cove.Client, id string, state api.SandboxState) api.Sandbox {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	sb, err := c.WaitSandbox(ctx, id, state, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if sb.State != state {
		t.Fatalf("sandbox %s is %s (%s); want %s", id, sb.State, sb.StateReason, state)
	}
	return sb
}

// TestWorkloadMetered: a tenant's workload `sleep 600` is charged while it
// runs (GET /v1/usage, its cost_usd), answers to its team's monthly
// limit (budget events naming it, cancelled at the limit with a
// state_reason naming the budget), and its end does not charge again what
// the running meter charged.
func TestWorkloadMetered(t *testing.T) {
	s := pricedServer(t, 0.01)
	c, _, teamID := tenant(t, s, "workload-tenant")
	limit := 0.05 // about 5 s of one CPU
	if _, err := s.Admin.UpdateTeam(t.Context(), teamID, api.UpdateTeamRequest{SpendLimitUSD: &limit}); err != nil {
		t.Fatal(err)
	}
	cpus := 1.0
	w, err := c.SubmitWorkload(t.Context(), api.CreateWorkloadRequest{Command: "sleep 600", Resources: &api.WorkloadResourcesRequest{CPUs: &cpus}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		c.CancelWorkload(ctx, w.ID)
	})
	waitFor(t, "cost of the running workload in GET /v1/usage", func() bool {
		u, _ := usageItem(t, c, w.ID)
		cur, err := c.GetWorkload(t.Context(), w.ID)
		if err != nil {
			t.Fatal(err)
		}
		return u.CostUSD > 0 && (cur.State == api.WorkloadRunning || cur.State == api.WorkloadCancelled)
	})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	done, err := c.WaitWorkload(ctx, w.ID, api.WorkloadCancelled, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("workload %s (%s) at $%.4f of the team's $%.2f", done.State, done.StateReason, done.CostUSD, limit)
	if done.State != api.WorkloadCancelled || !strings.Contains(done.StateReason, "spend limit") {
		t.Fatalf("workload is %s (%s); want cancelled at the team's spend limit", done.State, done.StateReason)
	}

	// Its budget events name it, scope team, alerts before the limit. The
	// state is stored just before its events are appended: the wait may
	// return between the two.
	var l api.List[api.Event]
	waitFor(t, "the workload's workload.cancelled event", func() bool {
		if l, err = c.Events(t.Context(), cove.EventQuery{Types: []string{"budget.alert", "budget.exceeded", "workload.cancelled"}, Limit: 100}); err != nil {
			t.Fatal(err)
		}
		return slices.ContainsFunc(l.Items, func(e api.Event) bool { return e.Type == "workload.cancelled" && e.Data["workload_id"] == w.ID })
	})
	var got []string
	for _, e := range l.Items {
		if e.Data["workload_id"] != w.ID {
			continue
		}
		if e.Type != "workload.cancelled" && e.Data["scope"] != "team" {
			t.Errorf("%s event scope %v; want team", e.Type, e.Data["scope"])
		}
		got = append(got, e.Type)
	}
	if want := []string{"budget.alert", "budget.alert", "budget.exceeded", "workload.cancelled"}; !slices.Equal(got, want) {
		t.Errorf("events naming the workload %v; want %v", got, want)
	}

	// Charged once: the usage item is the workload's cost, and the
	// team's month is the sum of its items.
	u, r := usageItem(t, c, w.ID)
	if !near(u.CostUSD, done.CostUSD) || u.CostUSD < limit || u.CPUS <= 0 {
		t.Errorf("usage item %+v; want $%v (at least the limit)", u, done.CostUSD)
	}
	var sum float64
	for _, it := range r.Items {
		sum += it.CostUSD
	}
	if !near(r.MonthCostUSD, sum) {
		t.Errorf("month cost $%v; want the sum of the items $%v", r.MonthCostUSD, sum)
	}
	if held := done.EndedAt.Sub(*done.PlacedAt).Seconds() * cpus * 0.01; !near(done.CostUSD, held) {
		t.Errorf("cost $%v; want placed_at to ended_at × price $%v", done.CostUSD, held)
	}

	// Over its limit the team submits in vain.
	if _, err := c.SubmitWorkload(t.Context(), api.CreateWorkloadRequest{Command: "true"}); api.ErrorCode(err) != api.CodeBudgetExceeded {
		t.Errorf("submit over the team's limit: %v; want budget_exceeded", err)
	}
}

// TestQueuedWorkloadCap: a tenant cannot queue more workloads than
// --max-queued-workloads-per-team; the refusal is 429 resource_exhausted
// saying the cap and what to do, and it counts per team.
func TestQueuedWorkloadCap(t *testing.T) {
	s := pricedServer(t, 0, "--max-queued-workloads-per-team", "2")
	gpu := api.Admission{ManagedEnvironment: true, GPU: true}
	submit := func(c *cove.Client) (api.Workload, error) {
		// One GPU on a node without GPUs: it stays queued.
		return c.SubmitWorkload(t.Context(), api.CreateWorkloadRequest{Command: "true", Resources: &api.WorkloadResourcesRequest{GPUs: 1}})
	}
	var clients []*cove.Client
	var keyA string
	for _, name := range []string{"queue-a", "queue-b"} {
		c, key, id := tenant(t, s, name)
		if _, err := s.Admin.UpdateTeam(t.Context(), id, api.UpdateTeamRequest{Admission: &gpu}); err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
		if keyA == "" {
			keyA = key
		}
	}
	a, b := clients[0], clients[1]
	var queued []api.Workload
	for range 2 {
		w, err := submit(a)
		if err != nil {
			t.Fatal(err)
		}
		queued = append(queued, w)
	}
	_, err := submit(a)
	var e *api.Error
	if !errors.As(err, &e) || e.Code != api.CodeResourceExhausted || !strings.Contains(e.Message, "2 workloads queued") || !strings.Contains(e.Message, "cancel") {
		t.Fatalf("a third queued workload: %v; want resource_exhausted naming the cap of 2 and what to do", err)
	}
	code, _, body := e2etest.RawRequest(t, "POST", s.URL+"/v1/workloads", keyA, `{"command":"true","resources":{"gpus":1}}`)
	if code != 429 {
		t.Errorf("a third queued workload answers %d %s; want 429", code, body)
	}
	if _, err := submit(b); err != nil {
		t.Errorf("another team's first workload: %v", err)
	}
	if _, err := a.CancelWorkload(t.Context(), queued[0].ID); err != nil {
		t.Fatal(err)
	}
	if _, err := submit(a); err != nil {
		t.Errorf("a workload once one left the queue: %v", err)
	}
}

// TestWorkloadFailedStartCharged: a tenant's workload whose start fails
// after the node took it (its git source cannot be cloned: the name
// resolves nowhere) is charged for what it held from placed_at to its
// end, in its cost_usd and in GET /v1/usage.
func TestWorkloadFailedStartCharged(t *testing.T) {
	s := pricedServer(t, 0.01)
	c, _, _ := tenant(t, s, "failing-tenant")
	w, err := c.SubmitWorkload(t.Context(), api.CreateWorkloadRequest{
		Command: "true", Source: &api.Source{Type: api.SourceGit, URL: "http://nowhere.invalid/repo.git"},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	done, err := c.WaitWorkload(ctx, w.ID, api.WorkloadFailed, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("workload %s (%s), cost $%v", done.State, done.StateReason, done.CostUSD)
	if done.State != api.WorkloadFailed || done.StartedAt != nil {
		t.Fatalf("workload %s (%s), started_at %v; want failed during start", done.State, done.StateReason, done.StartedAt)
	}
	if done.PlacedAt == nil || !done.EndedAt.After(*done.PlacedAt) {
		t.Fatalf("placed_at %v, ended_at %v; want a placement before the end", done.PlacedAt, done.EndedAt)
	}
	if held := done.EndedAt.Sub(*done.PlacedAt).Seconds() * 0.01; done.CostUSD <= 0 || !near(done.CostUSD, held) {
		t.Errorf("cost $%v; want placed_at to ended_at × price $%v", done.CostUSD, held)
	}
	if u, _ := usageItem(t, c, w.ID); u.CostUSD <= 0 || !near(u.CostUSD, done.CostUSD) {
		t.Errorf("usage item %+v; want $%v", u, done.CostUSD)
	}
}
