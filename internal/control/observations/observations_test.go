package observations_test

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/observations"
	"github.com/cove-dev/cove/internal/node"
	"github.com/cove-dev/cove/internal/node/nodetest"
	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/internal/store/sqlite"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func report(sandboxID, dest, decision string, count int64, at time.Time, cmd string) node.Observation {
	return node.Observation{SandboxID: sandboxID, NetworkObservation: api.NetworkObservation{
		Destination: dest, Port: 443, Decision: decision, Count: count, BytesOut: count, BytesIn: 2 * count,
		FirstSeen: at, LastSeen: at, LastCommandID: cmd,
	}}
}

// failing refuses observations while fail is set.
type failing struct {
	store.Store
	fail bool
}

func (f *failing) AddObservations(ctx context.Context, r []store.Observation, n int) error {
	if f.fail {
		return api.Errorf(api.CodeUnavailable, "store down")
	}
	return f.Store.AddObservations(ctx, r, n)
}

// sandboxes is the core's lookup: a team sees its own sandboxes only.
type sandboxes struct{ st store.Store }

func (s sandboxes) Sandbox(ctx context.Context, teamID, ref string) (api.Sandbox, error) {
	return s.st.GetSandbox(ctx, teamID, ref)
}

type env struct {
	svc  *observations.Service
	st   *failing
	node *nodetest.Node
}

// newEnv stores sandboxes sbx_a (team_a, with command cmd_a) and sbx_b
// (team_b, with cmd_b) in SQLite, under a service over the fake node.
func newEnv(t *testing.T, now time.Time) *env {
	t.Helper()
	ctx := t.Context()
	db, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "cove.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	nd := nodetest.New()
	t.Cleanup(nd.Close)
	for _, x := range []string{"a", "b"} {
		if err := db.CreateTeam(ctx, api.Team{ID: "team_" + x, Name: x, CreatedAt: t0}); err != nil {
			t.Fatal(err)
		}
		sb := api.Sandbox{ID: "sbx_" + x, TeamID: "team_" + x, Template: "managed", State: api.StateRunning,
			Labels: map[string]string{}, Network: api.NetworkPolicy{Allow: []string{"x.test"}}, BudgetAlerts: []float64{}, CreatedAt: t0}
		if err := db.CreateSandbox(ctx, sb); err != nil {
			t.Fatal(err)
		}
		if err := db.CreateCommand(ctx, api.Command{ID: "cmd_" + x, SandboxID: sb.ID, Command: "true", State: api.CommandRunning}); err != nil {
			t.Fatal(err)
		}
	}
	st := &failing{Store: db}
	svc := observations.New(observations.Config{Flush: time.Second, Max: 100, Retention: 30 * 24 * time.Hour},
		st, nd, sandboxes{db}, func() time.Time { return now }, slog.New(slog.DiscardHandler))
	return &env{svc: svc, st: st, node: nd}
}

func (e *env) view(t *testing.T, teamID, ref string) []api.NetworkObservation {
	t.Helper()
	v, err := e.svc.Network(t.Context(), teamID, ref)
	if err != nil {
		t.Fatal(err)
	}
	return v.Observations
}

// TestReadsAddWhatIsNotStored: a read shows the same sums before a
// flush, after it, and with more reports pending (nothing counted twice
// or missed).
func TestReadsAddWhatIsNotStored(t *testing.T) {
	e := newEnv(t, t0)
	ctx := t.Context()
	e.node.Observe(report("sbx_a", "x.test", "allowed", 2, t0, ""))
	want := []api.NetworkObservation{report("", "x.test", "allowed", 2, t0, "").NetworkObservation}
	if d := cmp.Diff(want, e.view(t, "team_a", "sbx_a")); d != "" {
		t.Errorf("before the flush (-want +got):\n%s", d)
	}
	e.svc.Flush(ctx)
	if d := cmp.Diff(want, e.view(t, "team_a", "sbx_a")); d != "" {
		t.Errorf("after the flush (-want +got):\n%s", d)
	}
	t1 := t0.Add(time.Minute)
	e.node.Observe(report("sbx_a", "x.test", "allowed", 3, t1, ""))
	want[0].Count, want[0].BytesOut, want[0].BytesIn, want[0].LastSeen = 5, 5, 10, t1
	if d := cmp.Diff(want, e.view(t, "team_a", "sbx_a")); d != "" {
		t.Errorf("stored plus pending (-want +got):\n%s", d)
	}
	e.svc.Flush(ctx)
	if d := cmp.Diff(want, e.view(t, "team_a", "sbx_a")); d != "" {
		t.Errorf("after the second flush (-want +got):\n%s", d)
	}
	if _, err := e.svc.Network(ctx, "team_b", "sbx_a"); api.ErrorCode(err) != api.CodeNotFound {
		t.Errorf("team b reads team a's observations: %v", err)
	}
}

// TestOnlyOwnCommandsNamed: a command the sandbox's agent names is kept
// only when it is the sandbox's own; reports of sandboxes the store does
// not hold (the warm pool's) are dropped.
func TestOnlyOwnCommandsNamed(t *testing.T) {
	tests := []struct{ name, cmd, want string }{
		{"its own", "cmd_a", "cmd_a"},
		{"another sandbox's", "cmd_b", ""},
		{"none such", "cmd_nonesuch", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, t0)
			e.node.Observe(report("sbx_a", "x.test", "denied", 1, t0, tt.cmd), report("sbx_warm", "x.test", "allowed", 1, t0, ""))
			e.svc.Flush(t.Context())
			stored, err := e.st.ListObservations(t.Context(), "sbx_a")
			if err != nil {
				t.Fatal(err)
			}
			if len(stored) != 1 || stored[0].LastCommandID != tt.want {
				t.Errorf("stored %+v; want one row naming %q", stored, tt.want)
			}
			if warm, _ := e.st.ListObservations(t.Context(), "sbx_warm"); len(warm) != 0 {
				t.Errorf("a sandbox the store does not hold: %+v", warm)
			}
		})
	}
}

// TestKeptWhileStoreFails: reports the store refuses are kept, shown, and
// stored at a later flush, once.
func TestKeptWhileStoreFails(t *testing.T) {
	e := newEnv(t, t0)
	ctx := t.Context()
	count := func() int64 {
		t.Helper()
		v := e.view(t, "team_a", "sbx_a")
		if len(v) != 1 {
			t.Fatalf("observations %+v", v)
		}
		return v[0].Count
	}
	e.node.Observe(report("sbx_a", "x.test", "allowed", 1, t0, ""))
	e.st.fail = true
	e.svc.Flush(ctx)
	e.node.Observe(report("sbx_a", "x.test", "allowed", 1, t0, ""))
	if n := count(); n != 2 {
		t.Errorf("count %d while the store fails, want 2", n)
	}
	e.st.fail = false
	e.svc.Flush(ctx)
	if n := count(); n != 2 {
		t.Errorf("count %d after the store came back, want 2", n)
	}
	if rows, _ := e.st.ListObservations(ctx, "sbx_a"); len(rows) != 1 || rows[0].Count != 2 {
		t.Errorf("stored %+v", rows)
	}
}

// TestExpire: rows last seen before the retention go, newer ones stay.
func TestExpire(t *testing.T) {
	now := t0.Add(60 * 24 * time.Hour)
	e := newEnv(t, now)
	e.node.Observe(
		report("sbx_a", "old.test", "allowed", 1, now.Add(-31*24*time.Hour), ""),
		report("sbx_a", "new.test", "allowed", 1, now.Add(-29*24*time.Hour), ""),
	)
	e.svc.Flush(t.Context())
	e.svc.Expire(t.Context())
	if got := e.view(t, "team_a", "sbx_a"); len(got) != 1 || got[0].Destination != "new.test" {
		t.Fatalf("after expiry: %+v", got)
	}
}
