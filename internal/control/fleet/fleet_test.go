package fleet

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync"
	"testing"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/fleet/join/jointest"
	"github.com/cove-dev/cove/internal/fleet/fleetwire"
	"github.com/cove-dev/cove/internal/node"
	"github.com/cove-dev/cove/internal/node/nodetest"
	"github.com/cove-dev/cove/internal/store"
)

// memStore is store.Fleet in memory: the fleet's tests run in synctest
// bubbles, where a database's goroutines have no place.
type memStore struct {
	*jointest.Store // the fleet's named values
	mu              sync.Mutex
	nodes           map[string]store.Node
	placed          map[string]store.Placement
}

func newMemStore() *memStore {
	return &memStore{Store: jointest.NewStore(), nodes: map[string]store.Node{}, placed: map[string]store.Placement{}}
}

func (s *memStore) CreateNode(ctx context.Context, n store.Node) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.nodes[n.ID]; ok {
		return api.Errorf(api.CodeConflict, "exists")
	}
	s.nodes[n.ID] = n
	return nil
}

func (s *memStore) GetNode(ctx context.Context, id string) (store.Node, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, ok := s.nodes[id]
	if !ok {
		return n, api.Errorf(api.CodeNotFound, "no node")
	}
	return n, nil
}

func (s *memStore) UpdateNode(ctx context.Context, n store.Node) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nodes[n.ID] = n
	return nil
}

func (s *memStore) ListNodes(ctx context.Context) ([]store.Node, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Collect(maps.Values(s.nodes)), nil
}

func (s *memStore) PutPlacement(ctx context.Context, p store.Placement) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.placed[p.SandboxID] = p
	return nil
}

func (s *memStore) GetPlacement(ctx context.Context, id string) (store.Placement, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.placed[id]
	if !ok {
		return p, api.Errorf(api.CodeNotFound, "no placement")
	}
	return p, nil
}

func (s *memStore) DeletePlacement(ctx context.Context, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.placed, id)
	return nil
}

func (s *memStore) ListPlacements(ctx context.Context, nodeID string) ([]store.Placement, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []store.Placement
	for _, p := range s.placed {
		if nodeID == "" || p.NodeID == nodeID {
			out = append(out, p)
		}
	}
	return out, nil
}

func (s *memStore) BeatNode(ctx context.Context, b store.NodeBeat) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, ok := s.nodes[b.ID]
	switch {
	case !ok:
		return api.Errorf(api.CodeNotFound, "no node")
	case n.Epoch != b.Epoch || (n.State != api.NodeReady && n.State != api.NodeDraining):
		return api.Errorf(api.CodeConflict, "not live in that epoch")
	}
	n.HeartbeatAt, n.Capacity, n.GPUNames, n.Templates, n.JoinHash = &b.At, b.Capacity, b.GPUNames, b.Templates, ""
	s.nodes[b.ID] = n
	return nil
}

func (s *memStore) AdmitPlacement(ctx context.Context, p store.Placement, limit api.Resources) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, ok := s.nodes[p.NodeID]
	switch {
	case !ok:
		return api.Errorf(api.CodeNotFound, "no node")
	case n.State != api.NodeReady || n.Epoch != p.Epoch:
		return api.Errorf(api.CodeConflict, "not ready in that epoch")
	}
	var cpus float64
	var mem int64
	for _, o := range s.placed {
		if o.NodeID == p.NodeID && o.SandboxID != p.SandboxID {
			cpus, mem = cpus+o.Resources.CPUs, mem+o.Resources.MemoryMiB
		}
	}
	if err := store.CheckRoom(p, cpus, mem, limit); err != nil {
		return err
	}
	s.placed[p.SandboxID] = p
	return nil
}

// fakeNode is nodetest's node with generations: each save gets one, and a
// wake on any node of the fleet finds it (a shared save store).
type fakeNode struct {
	*nodetest.Node
	name string

	mu    sync.Mutex
	gen   int
	wakes []node.SandboxSpec
}

func (n *fakeNode) FinishSleep(ctx context.Context, id string) (node.SaveInfo, error) {
	info, err := n.Node.FinishSleep(ctx, id)
	if err != nil {
		return info, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.gen++
	info.Generation = fmt.Sprintf("%s-%d", n.name, n.gen)
	info.ArchiveBytes = 4096
	return info, nil
}

func (n *fakeNode) Wake(ctx context.Context, spec node.SandboxSpec) error {
	if err := n.Node.Admit(ctx, spec); err != nil { // records the call, fails as told
		return err
	}
	n.mu.Lock()
	n.wakes = append(n.wakes, spec)
	n.mu.Unlock()
	return n.Node.Start(ctx, spec)
}

func (n *fakeNode) woken() []node.SandboxSpec {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.wakes)
}

// lostCall is one call of Sandboxes.NodeLost.
type lostCall struct {
	Sandbox string
	Saved   bool
	Reason  string
}

type lostRecorder struct {
	mu         sync.Mutex
	calls      []lostCall
	reattached []string
	// unavailable is how many Reattach calls answer unavailable first (a
	// node that registered but does not serve yet).
	unavailable int
}

func (r *lostRecorder) NodeLost(ctx context.Context, id string, saved bool, reason string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, lostCall{id, saved, reason})
	return nil
}

func (r *lostRecorder) Reattach(ctx context.Context, id string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.unavailable > 0 {
		r.unavailable--
		return api.Errorf(api.CodeUnavailable, "node does not answer yet")
	}
	r.reattached = append(r.reattached, id)
	return nil
}

func (r *lostRecorder) reattachedIDs() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.reattached)
}

func (r *lostRecorder) got() []lostCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := slices.Clone(r.calls)
	sort.Slice(out, func(i, j int) bool { return out[i].Sandbox < out[j].Sandbox })
	return out
}

type harness struct {
	f     *Fleet
	store *memStore
	lost  *lostRecorder
	mu    sync.Mutex
	nodes map[string]*fakeNode // by address
}

func newHarness(t *testing.T, cfg Config) *harness {
	t.Helper()
	h := &harness{store: newMemStore(), lost: &lostRecorder{}, nodes: map[string]*fakeNode{}}
	if cfg.Store == nil {
		cfg.Store = h.store
	}
	cfg.Dial = h.dial
	f, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	f.SetSandboxes(h.lost)
	if err := f.Load(t.Context()); err != nil {
		t.Fatal(err)
	}
	h.f = f
	t.Cleanup(func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		for _, n := range h.nodes {
			n.Close()
		}
	})
	return h
}

func (h *harness) dial(nodeID, addr string) (NodeClient, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := h.nodes[addr]
	if n == nil {
		n = &fakeNode{Node: nodetest.New(), name: addr}
		h.nodes[addr] = n
	}
	return n, nil
}

func (h *harness) node(addr string) *fakeNode {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.nodes[addr]
}

// join registers a new node named name (its address is its name too)
// with cpus CPUs, 1024 MiB per CPU and the template "managed".
func (h *harness) join(t *testing.T, name string, cpus float64) fleetwire.Admission {
	t.Helper()
	a, err := h.f.Register(t.Context(), "", registration(name, cpus))
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func registration(name string, cpus float64) fleetwire.Registration {
	return fleetwire.Registration{Name: name, Addr: name,
		Capacity:  fleetwire.Capacity{CPUs: cpus, MemoryMiB: int64(cpus * 1024)},
		Templates: []string{"managed"}}
}

func spec(id string, cpus float64) node.SandboxSpec {
	return node.SandboxSpec{ID: id, Template: "managed", Resources: api.Resources{CPUs: cpus, MemoryMiB: int64(cpus * 1024)}}
}

// placedOn is the name of the node a sandbox is placed on, or "".
func (h *harness) placedOn(id string) string {
	n, ok := h.f.SandboxNode(id)
	if !ok {
		return ""
	}
	return n.Name
}

func wantCode(t *testing.T, err error, code api.Code) {
	t.Helper()
	if got := api.ErrorCode(err); got != code {
		t.Fatalf("error = %v; want code %q", err, code)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
