package meter_test

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/meter"
	"github.com/cove-dev/cove/internal/node/nodetest"
	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/internal/store/sqlite"
)

// The tests run in a synctest bubble: the meter's own ticker drives it
// every 5 s of fake time, which time.Sleep advances at once.

// Prices of the tests: a CPU costs $0.01 a second, and so does a GiB
// of save (asleep), nothing else.
var prices = api.Prices{VCPUSecond: 0.01, StorageGiBHour: 36}

const interval = 5 * time.Second

// life is a fake core: it records what the meter asks and applies it to
// the store as the core would (a sleep stores the sandbox asleep).
type life struct {
	st *sqlite.DB

	mu     sync.Mutex
	calls  []string // "sleep sbx_x", "terminate sbx_x", "fail sbx_x", "cancel team_x"
	events []event
	wls    []api.Workload // placed workloads, as MeterWorkloads returns them
}

type event struct {
	Type, Team, Sandbox, Workload string
	Data                          map[string]any
}

func (l *life) record(call string) {
	l.mu.Lock()
	l.calls = append(l.calls, call)
	l.mu.Unlock()
}

func (l *life) Calls() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.calls)
}

func (l *life) Events(types ...string) []event {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []event
	for _, e := range l.events {
		if slices.Contains(types, e.Type) {
			out = append(out, e)
		}
	}
	return out
}

func (l *life) setState(ctx context.Context, teamID, id string, state api.SandboxState) error {
	sb, err := l.st.GetSandbox(ctx, teamID, id)
	if err != nil {
		return err
	}
	sb.State = state
	return l.st.UpdateSandbox(ctx, sb)
}

func (l *life) Sandbox(ctx context.Context, teamID, ref string) (api.Sandbox, error) {
	return l.st.GetSandbox(ctx, teamID, ref)
}

func (l *life) Sleep(ctx context.Context, teamID, id, reason string) error {
	l.record("sleep " + id)
	return l.setState(ctx, teamID, id, api.StateAsleep)
}

func (l *life) Terminate(ctx context.Context, teamID, id string) error {
	l.record("terminate " + id)
	return l.setState(ctx, teamID, id, api.StateTerminated)
}

func (l *life) FailSetup(ctx context.Context, sb api.Sandbox, reason string) {
	l.record("fail " + sb.ID)
	l.setState(ctx, sb.TeamID, sb.ID, api.StateFailed)
}

func (l *life) Emit(ctx context.Context, teamID, typ, sandboxID string, data map[string]any) {
	l.mu.Lock()
	l.events = append(l.events, event{Type: typ, Team: teamID, Sandbox: sandboxID, Data: data})
	l.mu.Unlock()
}

func (l *life) EmitWorkload(ctx context.Context, w api.Workload, typ string, data map[string]any) {
	l.mu.Lock()
	l.events = append(l.events, event{Type: typ, Team: w.TeamID, Workload: w.ID, Data: data})
	l.mu.Unlock()
}

func (l *life) MeterWorkloads(ctx context.Context, now time.Time) []api.Workload {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.wls)
}

func (l *life) CancelTeamWorkloads(ctx context.Context, t api.Team, spent float64) {
	l.record("cancel " + t.ID)
}

// env is a meter over a real SQLite store and the fake node, running
// until the test ends.
type env struct {
	m    *meter.Meter
	st   *sqlite.DB
	life *life
	node *nodetest.Node
}

// start runs a meter inside the test's bubble; everything it started
// ends before the bubble does.
func start(t *testing.T) *env {
	t.Helper()
	ctx := t.Context()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "cove.db"))
	if err != nil {
		t.Fatal(err)
	}
	nd := nodetest.New()
	l := &life{st: st}
	m := meter.New(meter.Config{Prices: prices, Interval: interval, RawRetention: time.Hour, RollupRetention: 24 * time.Hour},
		st, nd, l, func() time.Time { return time.Now().UTC() }, slog.New(slog.DiscardHandler))
	runCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Go(func() { m.Run(runCtx) })
	t.Cleanup(func() {
		stop()
		wg.Wait()
		nd.Close()
		st.Close()
	})
	for _, id := range []string{"team_a", "team_b"} {
		if err := st.CreateTeam(ctx, api.Team{ID: id, Name: id, CreatedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	return &env{m: m, st: st, life: l, node: nd}
}

// sandbox stores a sandbox of team_a with one CPU, started now in state.
func (e *env) sandbox(t *testing.T, id string, state api.SandboxState, edit func(*api.Sandbox)) api.Sandbox {
	t.Helper()
	now := time.Now().UTC()
	sb := api.Sandbox{ID: id, TeamID: "team_a", Template: "managed", State: state,
		Resources: api.Resources{CPUs: 1, MemoryMiB: 512, DiskMiB: 1024},
		Labels:    map[string]string{}, Network: api.NetworkPolicy{Allow: []string{}}, OnIdle: "sleep",
		OnBudget: api.OnBudgetSleep, BudgetAlerts: []float64{}, CreatedAt: now, StartedAt: &now,
	}
	if edit != nil {
		edit(&sb)
	}
	if err := e.st.CreateSandbox(t.Context(), sb); err != nil {
		t.Fatal(err)
	}
	return sb
}

// advance lets d of fake time pass and waits until the meter is idle.
func advance(d time.Duration) {
	time.Sleep(d)
	synctest.Wait()
}

func ptr[T any](v T) *T { return &v }

func pcts(evs []event) []float64 {
	var out []float64
	for _, e := range evs {
		out = append(out, e.Data["threshold_pct"].(float64))
	}
	return out
}

// TestAlertsFireOnceEach: each budget_alerts threshold raises one
// budget.alert when the spend first crosses it, however many ticks pass
// above it (the state is the store's), lowest first when one tick crosses
// several.
func TestAlertsFireOnceEach(t *testing.T) {
	tests := []struct {
		name   string
		cpus   float64
		alerts []float64
		run    time.Duration
		want   []float64
	}{
		// $0.01 a tick-second: 50% at 50 s, 80% at 80 s, then 15 s more.
		{"one at a time", 1, []float64{50, 80}, 97 * time.Second, []float64{50, 80}},
		// $0.20 a tick: 10% and 20% in the first tick, 50% in the third.
		{"two in one tick", 4, []float64{10, 20, 50}, 17 * time.Second, []float64{10, 20, 50}},
		{"none crossed", 1, []float64{90}, 42 * time.Second, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := start(t)
				e.sandbox(t, "sbx_a", api.StateRunning, func(sb *api.Sandbox) {
					sb.Resources.CPUs, sb.SpendLimitUSD, sb.BudgetAlerts = tt.cpus, ptr(1.0), tt.alerts
				})
				advance(tt.run)
				got := e.life.Events("budget.alert", "budget.exceeded")
				if !slices.Equal(pcts(got), tt.want) || len(got) != len(tt.want) {
					t.Errorf("budget events %+v; want alerts at %v and nothing else", got, tt.want)
				}
				if c := e.life.Calls(); len(c) > 0 {
					t.Errorf("below the limit the meter asked %v", c)
				}
			})
		})
	}
}

// TestOnBudgetAtLimit: a sandbox at its spend limit raises one
// budget.exceeded naming its on_budget, and the meter acts by its
// on_budget and state: a running sandbox sleeps or is terminated, an
// asleep one is terminated only if so asked (else the event is all), a
// sandbox in setup fails whatever its on_budget.
func TestOnBudgetAtLimit(t *testing.T) {
	tests := []struct {
		state    api.SandboxState
		onBudget string
		want     string // the meter's call, "" for none
	}{
		{api.StateRunning, api.OnBudgetSleep, "sleep"},
		{api.StateRunning, "", "sleep"},
		{api.StateRunning, api.OnBudgetTerminate, "terminate"},
		{api.StateAsleep, api.OnBudgetTerminate, "terminate"},
		{api.StateAsleep, api.OnBudgetSleep, ""},
		{api.StateSettingUp, api.OnBudgetSleep, "fail"},
		{api.StateSettingUp, api.OnBudgetTerminate, "fail"},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s_%s", tt.state, tt.onBudget), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := t.Context()
				e := start(t)
				sb := e.sandbox(t, "sbx_a", tt.state, func(sb *api.Sandbox) {
					sb.SpendLimitUSD, sb.OnBudget = ptr(0.1), tt.onBudget
				})
				if tt.state == api.StateAsleep {
					// A 1 GiB save: $0.01 a second, from the meter's first look.
					if err := e.st.SetStoredBytes(ctx, sb.ID, 1<<30); err != nil {
						t.Fatal(err)
					}
				}
				advance(32 * time.Second) // $0.10 by 10 s after the meter first looks, then more ticks
				var want []string
				if tt.want != "" {
					want = []string{tt.want + " sbx_a"}
				}
				if got := e.life.Calls(); !slices.Equal(got, want) {
					t.Errorf("the meter asked %v; want %v", got, want)
				}
				ex := e.life.Events("budget.exceeded")
				wantOn := tt.onBudget
				if wantOn == "" {
					wantOn = api.OnBudgetSleep
				}
				if len(ex) != 1 || ex[0].Sandbox != "sbx_a" || ex[0].Data["on_budget"] != wantOn || ex[0].Data["scope"] != "sandbox" {
					t.Errorf("budget.exceeded events %+v; want one of sbx_a naming on_budget %s", ex, wantOn)
				}
			})
		})
	}
}

// TestTeamLimit: a team whose month spend reaches its monthly limit is
// refused new work (budget_exceeded, scope team) and its sandboxes and
// workloads are stopped; another team is not; the next calendar month
// (UTC) starts from nothing.
func TestTeamLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		// Two minutes before the month ends (the bubble starts on
		// 2000-01-01).
		time.Sleep(time.Date(2000, 1, 31, 23, 58, 0, 0, time.UTC).Sub(time.Now()))
		e := start(t)
		ta, err := e.st.GetTeam(ctx, "team_a")
		if err != nil {
			t.Fatal(err)
		}
		ta.SpendLimitUSD = ptr(0.5)
		if err := e.st.UpdateTeam(ctx, ta); err != nil {
			t.Fatal(err)
		}
		if err := e.m.TeamBudgetRefusal(ctx, "team_a"); err != nil {
			t.Fatalf("refused before spending: %v", err)
		}
		e.sandbox(t, "sbx_a", api.StateRunning, nil)
		e.sandbox(t, "sbx_b", api.StateRunning, func(sb *api.Sandbox) { sb.TeamID = "team_b" })
		advance(62 * time.Second) // $0.60 each

		err = e.m.TeamBudgetRefusal(ctx, "team_a")
		if ae, ok := err.(*api.Error); !ok || ae.Code != api.CodeBudgetExceeded || ae.Details["scope"] != "team" {
			t.Errorf("team at its limit: %v; want budget_exceeded, scope team", err)
		}
		if err := e.m.TeamBudgetRefusal(ctx, "team_b"); err != nil {
			t.Errorf("another team: %v", err)
		}
		// The team's workloads are cancelled at every tick it stays at
		// its limit (new ones may have been placed).
		if got, want := slices.Compact(e.life.Calls()), []string{"sleep sbx_a", "cancel team_a"}; !slices.Equal(got, want) {
			t.Errorf("the meter asked %v; want %v", e.life.Calls(), want)
		}
		if ex := e.life.Events("budget.exceeded"); len(ex) != 1 || ex[0].Team != "team_a" || ex[0].Data["scope"] != "team" {
			t.Errorf("budget.exceeded events %+v; want one of team_a", ex)
		}

		// February.
		advance(time.Date(2000, 2, 1, 0, 0, 1, 0, time.UTC).Sub(time.Now()))
		if err := e.m.TeamBudgetRefusal(ctx, "team_a"); err != nil {
			t.Errorf("a new month: %v", err)
		}
	})
}

// TestSetupCharged: a sandbox in setup is charged as running time from
// its started_at, and its cost counts against its limit.
func TestSetupCharged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		e := start(t)
		e.sandbox(t, "sbx_a", api.StateSettingUp, nil)
		advance(22 * time.Second) // 4 ticks: 20 s
		u, err := e.st.SumUsage(ctx, store.UsageFilter{TeamID: "team_a", SandboxID: "sbx_a"})
		if err != nil {
			t.Fatal(err)
		}
		if len(u) != 1 || u[0].CPUS != 20 || u[0].CostUSD < 0.2-1e-9 || u[0].CostUSD > 0.2+1e-9 {
			t.Errorf("usage of 20 s of setup: %+v; want 20 CPU-seconds, $0.20", u)
		}
		sb, err := e.m.SandboxUsage(ctx, "team_a", "sbx_a")
		if err != nil || sb.CostUSD < 0.2-1e-9 {
			t.Errorf("sandbox usage %+v, %v; want cost_usd 0.20", sb, err)
		}
	})
}
