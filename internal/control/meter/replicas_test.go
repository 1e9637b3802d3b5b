package meter_test

import (
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/meter"
	"github.com/cove-dev/cove/internal/store/sqlite"
)

// clock is a fake clock the test moves.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

// TestStaleMeterChargesNothing: two meters over one store, as on two
// replicas that both believe they lead for a moment. The stale one's
// charge, made from a cursor the other moved, is refused whole; it reads
// the store again and charges on from there, so every second is charged
// exactly once.
func TestStaleMeterChargesNothing(t *testing.T) {
	ctx := t.Context()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "cove.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.CreateTeam(ctx, api.Team{ID: "team_a", Name: "alpha", CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 1, 2, 3, 4, 0, 0, time.UTC)
	sb := api.Sandbox{ID: "sbx_a", TeamID: "team_a", Template: "managed", State: api.StateRunning,
		Resources: api.Resources{CPUs: 1, MemoryMiB: 512, DiskMiB: 1024},
		Labels:    map[string]string{}, Network: api.NetworkPolicy{Allow: []string{}}, OnIdle: "sleep",
		OnBudget: api.OnBudgetSleep, BudgetAlerts: []float64{}, CreatedAt: t0, StartedAt: &t0,
	}
	if err := st.CreateSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	clk := &clock{}
	newMeter := func() *meter.Meter {
		return meter.New(meter.Config{Prices: prices, Interval: interval, RawRetention: time.Hour, RollupRetention: 24 * time.Hour},
			st, nil, &life{st: st}, clk.now, slog.New(slog.DiscardHandler))
	}
	a, b := newMeter(), newMeter()
	cost := func() float64 {
		t.Helper()
		got, err := st.GetSandbox(ctx, "team_a", "sbx_a")
		if err != nil {
			t.Fatal(err)
		}
		return got.CostUSD
	}
	steps := []struct {
		name string
		m    *meter.Meter
		at   time.Duration
		want float64 // cost_usd after the tick: $0.01 a second
	}{
		{"b charges the first 5 s", b, 5 * time.Second, 0.05},
		{"a reads b's cursor and charges 5 s more", a, 10 * time.Second, 0.10},
		{"b, stale, is refused", b, 10 * time.Second, 0.10},
		{"b reads the store again and charges on", b, 15 * time.Second, 0.15},
		{"a, stale now, is refused", a, 15 * time.Second, 0.15},
		{"a charges on", a, 20 * time.Second, 0.20},
	}
	for _, s := range steps {
		clk.set(t0.Add(s.at))
		s.m.Tick(ctx)
		if got := cost(); got < s.want-1e-9 || got > s.want+1e-9 {
			t.Fatalf("%s: cost_usd = %v; want %v", s.name, got, s.want)
		}
	}
}
