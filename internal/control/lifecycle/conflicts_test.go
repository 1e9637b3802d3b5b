package lifecycle_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/lifecycle"
	"github.com/cove-dev/cove/internal/node"
	"github.com/cove-dev/cove/internal/node/nodetest"
	"github.com/cove-dev/cove/internal/secrets"
	"github.com/cove-dev/cove/internal/service"
	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/internal/store/sqlite"
)

// Two control planes over one database file and one node stand for two
// replicas: each has its own life-cycle locks, so only the rows' versions
// keep them from losing each other's changes.

// raceStore is a replica's store that lets another replica's write land
// between this one's read and its write: the next UpdateSandbox that
// matches runs between first. It counts the updates refused as stale.
type raceStore struct {
	store.Store

	mu      sync.Mutex
	match   func(api.Sandbox) bool
	between func()

	stale atomic.Int64
}

// race arranges for between to run ahead of the next update that match
// selects.
func (r *raceStore) race(match func(api.Sandbox) bool, between func()) {
	r.mu.Lock()
	r.match, r.between = match, between
	r.mu.Unlock()
}

func (r *raceStore) UpdateSandbox(ctx context.Context, sb api.Sandbox) error {
	r.before(sb)
	return r.count(r.Store.UpdateSandbox(ctx, sb))
}

// UpdateSandboxEvent is a state's update (with its event), raced as any.
func (r *raceStore) UpdateSandboxEvent(ctx context.Context, sb api.Sandbox, e api.Event) (api.Event, error) {
	r.before(sb)
	e, err := r.Store.UpdateSandboxEvent(ctx, sb, e)
	return e, r.count(err)
}

// before runs the write arranged to land ahead of an update of sb.
func (r *raceStore) before(sb api.Sandbox) {
	r.mu.Lock()
	var between func()
	if r.match != nil && r.match(sb) {
		between, r.match, r.between = r.between, nil, nil
	}
	r.mu.Unlock()
	if between != nil {
		between()
	}
}

// count counts an update refused as stale.
func (r *raceStore) count(err error) error {
	if store.Stale(err) {
		r.stale.Add(1)
	}
	return err
}

type replica struct {
	core  *lifecycle.Core
	plane *service.Plane
	st    *raceStore
}

type replicas struct {
	a, b replica
	node *nodetest.Node
	// db is a third view of the database, for the test's own reads.
	db   *sqlite.DB
	team string
	key  string
}

// newReplicas starts two control planes over one SQLite file and one fake
// node. wrap, when not nil, wraps replica b's store further; it is given
// the test's own view of the database too. wrapNode, when not nil, is the
// node both replicas call, over the fake.
func newReplicas(t *testing.T, wrap func(st, db store.Store) store.Store, wrapNode func(*nodetest.Node) lifecycle.Node) *replicas {
	t.Helper()
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "cove.db")
	open := func() *sqlite.DB {
		st, err := sqlite.Open(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}
	cfg := lifecycle.DefaultConfig()
	cfg.Templates = []string{"managed"}
	cfg.WarmPool = 0
	cfg.Secrets = secrets.NewKeyring(newKey(t))
	nd := nodetest.New()
	t.Cleanup(nd.Close)
	r := &replicas{node: nd, db: open()}
	var n lifecycle.Node = nd
	if wrapNode != nil {
		n = wrapNode(nd)
	}
	for i, rep := range []*replica{&r.a, &r.b} {
		rep.st = &raceStore{Store: open()}
		var st store.Store = rep.st
		if i == 1 && wrap != nil {
			st = wrap(st, r.db)
		}
		plane, err := service.NewPlane(cfg, st, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		plane.SetNode(n)
		rep.core, rep.plane = plane.Core, plane
		t.Cleanup(plane.Core.Close)
	}
	// The node reports exits to one replica, as a node does to the one it
	// talks to.
	nd.OnExit = r.a.core.OnExit
	key, err := r.a.plane.Teams.Bootstrap(ctx)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := r.a.plane.Teams.Authenticate(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	r.team, r.key = admin.Team.ID, key
	return r
}

// stored polls the database until the sandbox is in state want, and
// returns it as stored.
func (r *replicas) stored(t *testing.T, id string, want api.SandboxState) api.Sandbox {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		sb, err := r.db.GetSandbox(t.Context(), "", id)
		if err != nil {
			t.Fatal(err)
		}
		if sb.State == want {
			return sb
		}
		if sb.State.Terminal() || time.Now().After(deadline) {
			t.Fatalf("sandbox %s is %s (%s); want %s", id, sb.State, sb.StateReason, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// running creates a sandbox through replica a and waits until it runs.
func (r *replicas) running(t *testing.T) api.Sandbox {
	t.Helper()
	sb, err := r.a.core.CreateSandbox(t.Context(), r.team, api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return r.stored(t, sb.ID, api.StateRunning)
}

// onNode waits until the node runs the sandbox under the policy want
// (a wake applies a policy stored while it was under way right after it
// records the sandbox running), and returns the policy it runs under.
func (r *replicas) onNode(t *testing.T, id string, want []string) []string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s, ok := r.node.Sandbox(id)
		if !ok || s.State != nodetest.Running {
			t.Fatalf("the node does not run %s", id)
		}
		if slices.Equal(s.Policy.Allow, want) || time.Now().After(deadline) {
			return s.Policy.Allow
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func allow(host string) api.UpdateSandboxRequest {
	return api.UpdateSandboxRequest{Network: &api.NetworkPolicy{Allow: []string{host}}}
}

// TestPatchAndSleepAcrossReplicas: a PATCH of a sandbox's network through
// one replica and a sleep through the other, landing in every order that
// matters, keep both: the sandbox ends asleep with the new policy stored,
// and wakes under it.
func TestPatchAndSleepAcrossReplicas(t *testing.T) {
	r := newReplicas(t, nil, nil)
	ctx := t.Context()
	isState := func(st api.SandboxState) func(api.Sandbox) bool {
		return func(sb api.Sandbox) bool { return sb.State == st }
	}
	tests := []struct {
		name string
		// run makes the two changes of the sandbox; patch is its PATCH.
		run func(t *testing.T, sb api.Sandbox, patch api.UpdateSandboxRequest)
		// lost is the replica whose write must have been refused once.
		lost *raceStore
	}{
		{
			name: "sleep lands inside the PATCH",
			run: func(t *testing.T, sb api.Sandbox, patch api.UpdateSandboxRequest) {
				r.b.st.race(func(cur api.Sandbox) bool { return slices.Equal(cur.Network.Allow, patch.Network.Allow) }, func() {
					if _, err := r.a.core.SleepSandbox(ctx, r.team, sb.ID, "by request"); err != nil {
						t.Error(err)
					}
				})
				if _, err := r.b.core.UpdateSandbox(ctx, r.team, sb.ID, patch); err != nil {
					t.Fatal(err)
				}
			},
			lost: r.b.st,
		},
		{
			name: "PATCH lands inside the sleep",
			run: func(t *testing.T, sb api.Sandbox, patch api.UpdateSandboxRequest) {
				r.a.st.race(isState(api.StateSleeping), func() {
					if _, err := r.b.core.UpdateSandbox(ctx, r.team, sb.ID, patch); err != nil {
						t.Error(err)
					}
				})
				if _, err := r.a.core.SleepSandbox(ctx, r.team, sb.ID, "by request"); err != nil {
					t.Fatal(err)
				}
			},
			lost: r.a.st,
		},
		{
			name: "PATCH lands inside the save",
			run: func(t *testing.T, sb api.Sandbox, patch api.UpdateSandboxRequest) {
				r.a.st.race(isState(api.StateAsleep), func() {
					got, err := r.b.core.UpdateSandbox(ctx, r.team, sb.ID, patch)
					if err != nil || got.State != api.StateSleeping {
						t.Errorf("PATCH of the sleeping sandbox = %s, %v; want it stored while sleeping", got.State, err)
					}
				})
				if _, err := r.a.core.SleepSandbox(ctx, r.team, sb.ID, "by request"); err != nil {
					t.Fatal(err)
				}
			},
			lost: r.a.st,
		},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sb := r.running(t)
			patch := allow(fmt.Sprintf("api%d.example.com", i))
			before := tt.lost.stale.Load()
			tt.run(t, sb, patch)
			asleep := r.stored(t, sb.ID, api.StateAsleep)
			if !slices.Equal(asleep.Network.Allow, patch.Network.Allow) {
				t.Errorf("stored policy = %v; want %v, the PATCH's", asleep.Network.Allow, patch.Network.Allow)
			}
			if asleep.StateReason != "by request" {
				t.Errorf("state reason = %q; want the sleep's", asleep.StateReason)
			}
			if tt.lost.stale.Load() == before {
				t.Error("no write was refused as stale: the race did not happen")
			}
			if _, err := r.b.core.WakeSandbox(ctx, r.team, sb.ID); err != nil {
				t.Fatal(err)
			}
			r.stored(t, sb.ID, api.StateRunning)
			if got := r.onNode(t, sb.ID, patch.Network.Allow); !slices.Equal(got, patch.Network.Allow) {
				t.Errorf("policy on the node after the wake = %v; want %v", got, patch.Network.Allow)
			}
		})
	}
}

// TestPatchDuringWakeAcrossReplicas: a PATCH stored through one replica
// while the other wakes the sandbox under the policy it read reaches the
// node once the wake is done.
func TestPatchDuringWakeAcrossReplicas(t *testing.T) {
	r := newReplicas(t, nil, nil)
	ctx := t.Context()
	sb := r.running(t)
	if _, err := r.a.core.SleepSandbox(ctx, r.team, sb.ID, ""); err != nil {
		t.Fatal(err)
	}
	r.stored(t, sb.ID, api.StateAsleep)
	patch := allow("late.example.com")
	r.a.st.race(func(cur api.Sandbox) bool { return cur.State == api.StateRunning }, func() {
		got, err := r.b.core.UpdateSandbox(ctx, r.team, sb.ID, patch)
		if err != nil || got.State != api.StateWaking {
			t.Errorf("PATCH of the waking sandbox = %s, %v; want it stored while waking", got.State, err)
		}
	})
	if _, err := r.a.core.WakeSandbox(ctx, r.team, sb.ID); err != nil {
		t.Fatal(err)
	}
	running := r.stored(t, sb.ID, api.StateRunning)
	if !slices.Equal(running.Network.Allow, patch.Network.Allow) {
		t.Errorf("stored policy = %v; want %v", running.Network.Allow, patch.Network.Allow)
	}
	if got := r.onNode(t, sb.ID, patch.Network.Allow); !slices.Equal(got, patch.Network.Allow) {
		t.Errorf("policy on the node = %v; want %v, the PATCH's", got, patch.Network.Allow)
	}
}

// TestConcurrentPatchAndSleep runs a PATCH through one replica and a sleep
// through the other at the same time, many times over: whichever lands
// first, the sandbox ends asleep with the PATCH's policy and wakes under
// it.
func TestConcurrentPatchAndSleep(t *testing.T) {
	r := newReplicas(t, nil, nil)
	ctx := t.Context()
	sb := r.running(t)
	const rounds = 30
	for i := range rounds {
		patch := allow(fmt.Sprintf("round%d.example.com", i))
		var wg sync.WaitGroup
		wg.Go(func() {
			if _, err := r.a.core.SleepSandbox(ctx, r.team, sb.ID, "by request"); err != nil {
				t.Errorf("round %d: sleep: %v", i, err)
			}
		})
		wg.Go(func() {
			if _, err := r.b.core.UpdateSandbox(ctx, r.team, sb.ID, patch); err != nil {
				t.Errorf("round %d: PATCH: %v", i, err)
			}
		})
		wg.Wait()
		asleep := r.stored(t, sb.ID, api.StateAsleep)
		if !slices.Equal(asleep.Network.Allow, patch.Network.Allow) {
			t.Fatalf("round %d: stored policy = %v; want %v", i, asleep.Network.Allow, patch.Network.Allow)
		}
		if _, err := r.b.core.WakeSandbox(ctx, r.team, sb.ID); err != nil {
			t.Fatal(err)
		}
		r.stored(t, sb.ID, api.StateRunning)
		if got := r.onNode(t, sb.ID, patch.Network.Allow); !slices.Equal(got, patch.Network.Allow) {
			t.Fatalf("round %d: policy on the node = %v; want %v", i, got, patch.Network.Allow)
		}
	}
	t.Logf("%d rounds; writes refused as stale: %d through a, %d through b", rounds, r.a.st.stale.Load(), r.b.st.stale.Load())
}

// busyStore is a store whose sandboxes another writer changes between
// every read and write of this replica: its updates are always stale.
type busyStore struct {
	store.Store
	other store.Store
}

func (s busyStore) UpdateSandbox(ctx context.Context, sb api.Sandbox) error {
	if err := s.touch(ctx, sb); err != nil {
		return err
	}
	return s.Store.UpdateSandbox(ctx, sb)
}

func (s busyStore) UpdateSandboxEvent(ctx context.Context, sb api.Sandbox, e api.Event) (api.Event, error) {
	if err := s.touch(ctx, sb); err != nil {
		return e, err
	}
	return s.Store.UpdateSandboxEvent(ctx, sb, e)
}

// touch is the other writer's change, between this replica's read and
// its write.
func (s busyStore) touch(ctx context.Context, sb api.Sandbox) error {
	cur, err := s.other.GetSandbox(ctx, "", sb.ID)
	if err != nil {
		return err
	}
	cur.Labels = map[string]string{"touched": fmt.Sprint(cur.Version)}
	return s.other.UpdateSandbox(ctx, cur)
}

// TestConflictWhenRetriesRunOut: a PATCH that loses the race every time
// answers 409 conflict, a retryable answer, and stores nothing of its own.
func TestConflictWhenRetriesRunOut(t *testing.T) {
	r := newReplicas(t, func(st, db store.Store) store.Store { return busyStore{Store: st, other: db} }, nil)
	sb := r.running(t)

	srv := httptest.NewServer(r.b.plane.Handler(slog.New(slog.DiscardHandler)))
	t.Cleanup(srv.Close)
	body, _ := json.Marshal(allow("never.example.com"))
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPatch, srv.URL+"/v1/sandboxes/"+sb.ID, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+r.key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var e struct {
		Error api.Error `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusConflict || e.Error.Code != api.CodeConflict {
		t.Fatalf("PATCH = %d %+v; want 409 conflict", resp.StatusCode, e.Error)
	}
	got, err := r.db.GetSandbox(t.Context(), "", sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Network.Allow) != 0 {
		t.Errorf("stored policy = %v; want none of the refused PATCH", got.Network.Allow)
	}
	if want := fmt.Sprint(sb.Version + store.UpdateAttempts - 1); got.Labels["touched"] != want {
		t.Errorf("the other writer's label = %q; want %q, its last change kept", got.Labels["touched"], want)
	}
}

// TestPatchFloodCannotStopSleep: a tenant sending PATCH after PATCH
// through one replica cannot keep the other from putting its sandbox to
// sleep (a budget's or an idle timeout's sleep, say): a transition that
// loses a round to a PATCH applies again over it.
func TestPatchFloodCannotStopSleep(t *testing.T) {
	r := newReplicas(t, nil, nil)
	ctx := t.Context()
	for round := range 3 {
		sb := r.running(t)
		stop := make(chan struct{})
		var patches atomic.Int64
		var wg sync.WaitGroup
		for w := range 2 {
			wg.Go(func() {
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					_, err := r.b.core.UpdateSandbox(ctx, r.team, sb.ID, allow(fmt.Sprintf("flood%d-%d.example.com", w, i)))
					if err != nil && api.ErrorCode(err) != api.CodeConflict {
						t.Errorf("PATCH: %v", err)
						return
					}
					patches.Add(1)
				}
			})
		}
		// Let the flood run before the sleep comes.
		for patches.Load() < 20 {
			time.Sleep(time.Millisecond)
		}
		if _, err := r.a.core.SleepSandbox(ctx, r.team, sb.ID, "spend limit reached"); err != nil {
			close(stop)
			wg.Wait()
			t.Fatalf("round %d: sleep under a PATCH flood: %v", round, err)
		}
		r.stored(t, sb.ID, api.StateAsleep)
		close(stop)
		wg.Wait()
		if got := r.stored(t, sb.ID, api.StateAsleep); got.StateReason != "spend limit reached" {
			t.Errorf("round %d: state reason = %q", round, got.StateReason)
		}
		t.Logf("round %d: %d PATCHes; writes of a refused as stale so far: %d", round, patches.Load(), r.a.st.stale.Load())
	}
}

// TestSleepThroughBothReplicas: a sleep through one replica that loses
// to a sleep through the other decides again on the sandbox as it now is
// (sleeping: nothing to do) and succeeds, as a second sleep through one
// replica does; a wake likewise.
func TestSleepThroughBothReplicas(t *testing.T) {
	r := newReplicas(t, nil, nil)
	ctx := t.Context()
	sb := r.running(t)
	before := r.a.st.stale.Load()
	r.a.st.race(func(cur api.Sandbox) bool { return cur.State == api.StateSleeping }, func() {
		if _, err := r.b.core.SleepSandbox(ctx, r.team, sb.ID, "through b"); err != nil {
			t.Error(err)
		}
	})
	got, err := r.a.core.SleepSandbox(ctx, r.team, sb.ID, "through a")
	if err != nil {
		t.Fatalf("sleep that lost the race: %v; want the no-op of an asleep or sleeping sandbox", err)
	}
	if got.State != api.StateSleeping && got.State != api.StateAsleep {
		t.Errorf("sleep answered %s", got.State)
	}
	if r.a.st.stale.Load() == before {
		t.Error("no write was refused as stale: the race did not happen")
	}
	if asleep := r.stored(t, sb.ID, api.StateAsleep); asleep.StateReason != "through b" {
		t.Errorf("state reason = %q; want the first sleep's", asleep.StateReason)
	}

	r.a.st.race(func(cur api.Sandbox) bool { return cur.State == api.StateWaking }, func() {
		if _, err := r.b.core.WakeSandbox(ctx, r.team, sb.ID); err != nil {
			t.Error(err)
		}
	})
	if _, err := r.a.core.WakeSandbox(ctx, r.team, sb.ID); err != nil {
		t.Fatalf("wake that lost the race: %v", err)
	}
	r.stored(t, sb.ID, api.StateRunning)
}

// slowSave is a node whose saves say they began (saving) and wait until
// released.
type slowSave struct {
	*nodetest.Node
	saving  chan struct{}
	release chan struct{}
}

func (n slowSave) FinishSleep(ctx context.Context, id string) (node.SaveInfo, error) {
	n.saving <- struct{}{}
	select {
	case <-n.release:
	case <-ctx.Done():
		return node.SaveInfo{}, ctx.Err()
	}
	return n.Node.FinishSleep(ctx, id)
}

// TestPatchWhileSavingAnswersAtOnce: a PATCH of a sleeping sandbox does
// not wait for its save (which may take minutes): it answers with the
// change stored, the sleep ends asleep over it, and the wake runs under it.
func TestPatchWhileSavingAnswersAtOnce(t *testing.T) {
	saving, release := make(chan struct{}, 1), make(chan struct{})
	r := newReplicas(t, nil, func(nd *nodetest.Node) lifecycle.Node {
		return slowSave{Node: nd, saving: saving, release: release}
	})
	ctx := t.Context()
	sb := r.running(t)
	if _, err := r.a.core.SleepSandbox(ctx, r.team, sb.ID, "by request"); err != nil {
		t.Fatal(err)
	}
	<-saving // the sleep holds the sandbox's life-cycle lock for its save
	patch := allow("while-saving.example.com")
	type answer struct {
		sb  api.Sandbox
		err error
	}
	answered := make(chan answer, 1)
	go func() { // through the replica that saves
		sb, err := r.a.core.UpdateSandbox(ctx, r.team, sb.ID, patch)
		answered <- answer{sb, err}
	}()
	var a answer
	select {
	case a = <-answered:
		close(release)
	case <-time.After(10 * time.Second):
		close(release)
		<-answered
		t.Fatal("the PATCH waited for the save")
	}
	got, err := a.sb, a.err
	if err != nil {
		t.Fatal(err)
	}
	if got.State != api.StateSleeping || !slices.Equal(got.Network.Allow, patch.Network.Allow) {
		t.Errorf("PATCH during the save answered %s with %v; want sleeping with %v", got.State, got.Network.Allow, patch.Network.Allow)
	}
	asleep := r.stored(t, sb.ID, api.StateAsleep)
	if !slices.Equal(asleep.Network.Allow, patch.Network.Allow) || asleep.StateReason != "by request" {
		t.Errorf("asleep with %v (%q); want %v and the sleep's reason", asleep.Network.Allow, asleep.StateReason, patch.Network.Allow)
	}
	if _, err := r.a.core.WakeSandbox(ctx, r.team, sb.ID); err != nil {
		t.Fatal(err)
	}
	r.stored(t, sb.ID, api.StateRunning)
	if got := r.onNode(t, sb.ID, patch.Network.Allow); !slices.Equal(got, patch.Network.Allow) {
		t.Errorf("policy on the node after the wake = %v; want %v", got, patch.Network.Allow)
	}
}
