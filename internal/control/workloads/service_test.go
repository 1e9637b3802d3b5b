package workloads

import (
	"context"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/runs"
	"github.com/cove-dev/cove/internal/id"
	"github.com/cove-dev/cove/internal/metering"
	"github.com/cove-dev/cove/internal/node"
	"github.com/cove-dev/cove/internal/node/nodetest"
	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/internal/store/sqlite"
)

// The service at its seam: the real SQLite store, the fake node, and
// fakes of the core below it (resources, ranges, exec specs, events).

type fakeCore struct{}

func (fakeCore) ResolveResources(*api.ResourcesRequest) (api.Resources, error) {
	return api.Resources{CPUs: 1, MemoryMiB: 512, DiskMiB: 1024}, nil
}
func (fakeCore) CheckSource(src *api.Source) (*api.Source, error) { return src, nil }
func (fakeCore) AllocRange(context.Context, string) (node.IDRange, error) {
	return node.IDRange{HostID: 100000, Size: 65536}, nil
}
func (fakeCore) ReleaseRange(context.Context, string) {}
func (fakeCore) LandAsset(context.Context, string, string, string, string, node.User) (string, error) {
	return "", nil
}
func (fakeCore) CloneSource(context.Context, string, string, string, api.Source, node.User) (string, error) {
	return "", nil
}
func (fakeCore) ExecSpec(_ context.Context, wl api.Workload) (node.ExecSpec, error) {
	return node.ExecSpec{ID: wl.ID, Shell: wl.Command, Argv: wl.Argv, Env: map[string]string{}}, nil
}
func (fakeCore) Resolve(_ context.Context, _ string, req *api.CreateWorkloadRequest) (*api.Image, *api.ResourcesRequest, func(), error) {
	return nil, &api.ResourcesRequest{}, func() {}, nil
}
func (fakeCore) Exists(string, string) bool                          { return true }
func (fakeCore) NodeTemplate(_, tmpl string) string                  { return tmpl }
func (fakeCore) DefaultUser(string, string) node.User                { return node.Users["user"] }
func (fakeCore) AdmitTemplate(context.Context, string, string) error { return nil }
func (fakeCore) AdmitGPUs(context.Context, string) error             { return nil }
func (fakeCore) TemplateReady(string) error                          { return nil }
func (fakeCore) CheckLimits(*api.Image, api.Resources) error         { return nil }
func (fakeCore) TeamRefusal(context.Context, string) error           { return nil }
func (fakeCore) SandboxRefusal(context.Context, api.Sandbox) error   { return nil }
func (fakeCore) Hourly(id, teamID string, from, to time.Time, use metering.Use) []store.Accrual {
	return []store.Accrual{{SandboxID: id, TeamID: teamID, Hour: from.Truncate(time.Hour), Until: to, CPUS: use.CPUS}}
}

// fakeSecrets passes every secret check.
type fakeSecrets struct{}

func (fakeSecrets) CheckRefs(string, map[string]string, map[string]string) error { return nil }
func (fakeSecrets) Resolve(context.Context, string, map[string]string) (map[string]string, error) {
	return nil, nil
}

type fakeSources struct{}

func (fakeSources) CheckSource(context.Context, string, *api.Source) error { return nil }

// events records the event types and wakes waiters.
type events struct {
	mu      sync.Mutex
	types   []string
	changed chan struct{}
}

func (e *events) Emit(ctx context.Context, teamID, typ, sb, cmd string, data map[string]any) {
	e.Record(ctx, teamID, typ, sb, cmd, data)
	e.Notify()
}
func (e *events) Record(_ context.Context, _, typ, _, _ string, _ map[string]any) {
	e.mu.Lock()
	e.types = append(e.types, typ)
	e.mu.Unlock()
}
func (e *events) Notify() {
	e.mu.Lock()
	close(e.changed)
	e.changed = make(chan struct{})
	e.mu.Unlock()
}
func (e *events) Changes() <-chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.changed
}
func (e *events) list() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.types)
}

type seam struct {
	svc  *Service
	st   *sqlite.DB
	node *nodetest.Node
	ev   *events
	team string
}

// newSeam builds the service in the bubble; its goroutines end at cleanup.
func newSeam(t *testing.T) *seam {
	t.Helper()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "cove.db"))
	if err != nil {
		t.Fatal(err)
	}
	team := api.Team{ID: "team_a", Name: "a", CreatedAt: time.Now()}
	if err := st.CreateTeam(t.Context(), team); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	ev := &events{changed: make(chan struct{})}
	exits := runs.NewExits(nil)
	c := fakeCore{}
	svc := New(ctx, &wg, Config{
		DefaultTemplate: "managed", Templates: []string{"managed"}, DefaultWorkdir: "/workspace",
		MaxQueuedWorkloadsPerTeam: 10, PidsLimit: 1024, MaxWait: time.Minute,
	}, Deps{
		Store: st, Core: c, Images: c, Events: ev, Meter: c,
		Checks: runs.Checker{Admission: c, Images: c, Secrets: fakeSecrets{}, Sources: fakeSources{}, Budgets: c},
		Exits:  exits, Log: slog.New(slog.DiscardHandler), Now: time.Now,
	})
	nd := nodetest.New()
	nd.OnExit = exits.Deliver
	svc.SetNode(nd)
	wg.Go(func() { svc.Run(ctx) })
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		nd.Close()
		st.Close()
	})
	return &seam{svc: svc, st: st, node: nd, ev: ev, team: team.ID}
}

// TestRunToEnd: a submitted workload is placed, runs its program as the
// container's one command, and its exit, delivered to its run's
// receiver, ends it with that exit, its container removed.
func TestRunToEnd(t *testing.T) {
	tests := []struct {
		name   string
		exit   node.Exit
		state  api.WorkloadState
		reason string
	}{
		{"exit 0", node.Exit{}, api.WorkloadExited, ""},
		{"exit 2", node.Exit{ExitCode: 2}, api.WorkloadExited, ""},
		{"timeout", node.Exit{ExitCode: -1, Signal: "KILL", TimedOut: true}, api.WorkloadFailed, "killed at its timeout (timeout_s 3600)"},
		{"signal", node.Exit{ExitCode: -1, Signal: "TERM"}, api.WorkloadFailed, "killed by SIGTERM"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newSeam(t)
				s.node.Run = func(context.Context, node.ExecSpec, *nodetest.Output) node.Exit {
					time.Sleep(10 * time.Second)
					return tt.exit
				}
				w, err := s.svc.SubmitWorkload(t.Context(), s.team, api.CreateWorkloadRequest{Command: "make"})
				if err != nil {
					t.Fatal(err)
				}
				got, err := s.svc.WaitWorkload(t.Context(), s.team, w.ID, api.WorkloadExited, time.Minute)
				if err != nil {
					t.Fatal(err)
				}
				if got.State != tt.state || got.StateReason != tt.reason {
					t.Fatalf("ended %s (%q), want %s (%q)", got.State, got.StateReason, tt.state, tt.reason)
				}
				if tt.exit.Signal == "" && (got.ExitCode == nil || *got.ExitCode != tt.exit.ExitCode) {
					t.Errorf("exit code %v, want %d", got.ExitCode, tt.exit.ExitCode)
				}
				synctest.Wait()
				if n, _ := s.node.Sandbox(w.ID); n.State == nodetest.Running {
					t.Errorf("its container still runs after its end")
				}
				ev := s.ev.list()
				if !slices.Contains(ev, "workload.started") || slices.Index(ev, "workload.started") > slices.Index(ev, "workload."+string(tt.state)) {
					t.Errorf("events %v; want workload.started before its end", ev)
				}
			})
		})
	}
}

// TestRecoverRequeues: a workload a restart cut short while starting is
// queued again, its devices freed, and placed anew.
func TestRecoverRequeues(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSeam(t)
		// The queue's owner makes its first pass at once; it must be
		// done, waiting for its tick or a kick, before the row exists,
		// or it may place the requeued row before the test looks.
		synctest.Wait()
		now := time.Now()
		w := api.Workload{ID: id.New("wl"), TeamID: s.team, Template: "managed", Command: "true",
			Resources: api.WorkloadResources{CPUs: 1, MemoryMiB: 512, DiskMiB: 1024, GPUs: 0},
			State:     api.WorkloadStarting, Devices: []string{"gpu0"}, CreatedAt: now, PlacedAt: &now,
			TimeoutS: 60, MaxQueueS: 60, Labels: map[string]string{}}
		if err := s.st.CreateWorkload(t.Context(), w); err != nil {
			t.Fatal(err)
		}
		keep, err := s.svc.Recover(t.Context())
		if err != nil || keep[w.ID] {
			t.Fatalf("Recover = %v, %v; want the starting one not kept", keep, err)
		}
		got, err := s.st.GetWorkload(t.Context(), s.team, w.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.State != api.WorkloadQueued || len(got.Devices) != 0 {
			t.Fatalf("after Recover it is %s with %v; want queued without devices", got.State, got.Devices)
		}
		s.svc.kickQueue()
		if got, _ = s.svc.WaitWorkload(t.Context(), s.team, w.ID, api.WorkloadExited, time.Minute); got.State != api.WorkloadExited {
			t.Fatalf("requeued workload ended %s (%q), want exited", got.State, got.StateReason)
		}
	})
}
