package fleet

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/fleet/fleetwire"
	"github.com/cove-dev/cove/internal/id"
	"github.com/cove-dev/cove/internal/store"
)

// Register admits a node: nodeID "" joins a new node by name (refused
// with conflict while a node of that name is registered and neither lost
// nor removed); otherwise the node registers again with the identity its
// certificate names. Each registration starts a new epoch; the answer
// lists the sandboxes assigned to the node in it.
func (f *Fleet) Register(ctx context.Context, nodeID string, r fleetwire.Registration) (fleetwire.Admission, error) {
	if r.Name == "" || r.Addr == "" {
		return fleetwire.Admission{}, api.Errorf(api.CodeInvalidArgument, "a registration needs the node's name and address")
	}
	now := time.Now()
	f.mu.Lock()
	defer f.mu.Unlock()
	var m *member
	if nodeID == "" {
		for _, o := range f.nodes {
			if o.row.Name != r.Name || o.row.State == api.NodeRemoved {
				continue
			}
			if o.row.State != api.NodeLost {
				return fleetwire.Admission{}, api.Errorf(api.CodeConflict, "a node named %q is already registered", r.Name)
			}
			// A lost node joining afresh is a new identity: the old one
			// is retired (its sandboxes went through the loss path).
			o.row.State = api.NodeRemoved
			if err := f.store.UpdateNode(ctx, o.row); err != nil {
				return fleetwire.Admission{}, err
			}
			closeClient(o)
		}
		m = &member{row: store.Node{ID: id.New("node"), Name: r.Name, State: api.NodeReady, CreatedAt: now}}
	} else {
		m = f.nodes[nodeID]
		if m == nil || m.row.State == api.NodeRemoved {
			return fleetwire.Admission{}, notMember(m, nodeID)
		}
		if m.row.Name != r.Name {
			for _, o := range f.nodes {
				if o != m && o.row.Name == r.Name && o.row.State != api.NodeRemoved {
					return fleetwire.Admission{}, api.Errorf(api.CodeConflict, "a node named %q is already registered", r.Name)
				}
			}
		}
	}
	row := m.row
	row.Name, row.Addr, row.Epoch, row.RegisteredAt = r.Name, r.Addr, row.Epoch+1, &now
	if row.State == api.NodeLost {
		row.State = api.NodeReady
	}
	row.Capacity = api.NodeCapacity{CPUs: r.Capacity.CPUs, MemoryMiB: r.Capacity.MemoryMiB, DiskMiB: r.Capacity.DiskMiB,
		GPUs: len(r.Capacity.GPUs.Names), GPUType: r.Capacity.GPUs.Type}
	client, err := f.cfg.Dial(row.ID, row.Addr)
	if err != nil {
		return fleetwire.Admission{}, fmt.Errorf("dial node %s at %s: %w", row.ID, row.Addr, err)
	}
	if nodeID == "" {
		err = f.store.CreateNode(ctx, row)
	} else {
		err = f.store.UpdateNode(ctx, row)
	}
	if err != nil {
		closeIfCloser(client)
		return fleetwire.Admission{}, err
	}
	closeClient(m)
	m.row, m.client, m.capacity, m.lastSeen = row, client, r.Capacity, now
	m.templates = setOf(r.Templates)
	f.nodes[row.ID] = m
	// The epoch is the node's now: placements on it move to it.
	var assigned []string
	for _, p := range f.placed {
		if p.NodeID == row.ID {
			p.Epoch = row.Epoch
			assigned = append(assigned, p.SandboxID)
		}
	}
	sort.Strings(assigned)
	f.queueReattachLocked(row.ID, row.Epoch, assigned)
	f.notifyLocked()
	f.log.Info("node registered", "node", row.ID, "name", row.Name, "addr", row.Addr, "epoch", row.Epoch, "assigned", len(assigned))
	return fleetwire.Admission{NodeID: row.ID, Epoch: row.Epoch, Assigned: nonNil(assigned),
		HeartbeatMS: f.cfg.Heartbeat.Milliseconds()}, nil
}

// Heartbeat records that a node is alive. A stale epoch or a lost node is
// answered with conflict (register again), a removed one with
// permission_denied.
func (f *Fleet) Heartbeat(ctx context.Context, nodeID string, hb fleetwire.Heartbeat) (fleetwire.HeartbeatAnswer, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	m := f.nodes[nodeID]
	switch {
	case m == nil || m.row.State == api.NodeRemoved:
		return fleetwire.HeartbeatAnswer{}, notMember(m, nodeID)
	case m.row.State == api.NodeLost:
		return fleetwire.HeartbeatAnswer{}, api.Errorf(api.CodeConflict, "node %s was declared lost; register again", nodeID)
	case hb.Epoch != m.row.Epoch || m.client == nil:
		return fleetwire.HeartbeatAnswer{}, api.Errorf(api.CodeConflict, "epoch %d of node %s is stale; register again", hb.Epoch, nodeID)
	}
	m.lastSeen = time.Now()
	m.capacity = hb.Capacity
	if t := setOf(hb.Templates); !maps.Equal(t, m.templates) {
		m.templates = t
		f.notifyLocked()
	}
	return fleetwire.HeartbeatAnswer{Epoch: m.row.Epoch}, nil
}

// Templates are the templates some ready or draining node can start now,
// sorted, and a channel closed at the next change of them or of the
// fleet's membership.
func (f *Fleet) Templates() ([]string, <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	set := map[string]bool{}
	for _, m := range f.nodes {
		if m.connected() {
			maps.Copy(set, m.templates)
		}
	}
	return slices.Sorted(maps.Keys(set)), f.changed
}

// Allowed answers permission_denied for a node that is removed or unknown:
// its certificate no longer admits it.
func (f *Fleet) Allowed(ctx context.Context, nodeID string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if m := f.nodes[nodeID]; m == nil || m.row.State == api.NodeRemoved {
		return notMember(m, nodeID)
	}
	return nil
}

// Run declares lost every node silent for LostAfter, until ctx ends.
func (f *Fleet) Run(ctx context.Context) error {
	tick := time.NewTicker(min(time.Second, f.cfg.LostAfter/5))
	defer tick.Stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-f.kick:
			f.reattachPending(ctx, &wg)
			continue
		case <-tick.C:
		}
		f.checkLost(ctx)
	}
}

func (f *Fleet) checkLost(ctx context.Context) {
	now := time.Now()
	f.mu.Lock()
	var silent []*member
	for _, m := range f.nodes {
		live := m.row.State == api.NodeReady || m.row.State == api.NodeDraining
		if live && now.Sub(m.lastSeen) >= f.cfg.LostAfter {
			silent = append(silent, m)
		}
	}
	f.mu.Unlock()
	for _, m := range silent {
		f.log.Warn("node lost", "node", m.row.ID, "name", m.row.Name)
		if err := f.retire(ctx, m.row.ID, api.NodeLost, "was lost"); err != nil {
			f.log.Error("declare node lost", "node", m.row.ID, "err", err)
		}
	}
}

// retire makes a node lost or removed and settles each of its sandboxes
// through the core: asleep from its recorded save, or failed.
func (f *Fleet) retire(ctx context.Context, nodeID string, state api.NodeState, what string) error {
	f.mu.Lock()
	m := f.nodes[nodeID]
	if m == nil {
		f.mu.Unlock()
		return api.Errorf(api.CodeNotFound, "node %s not found", nodeID)
	}
	row := m.row
	row.State = state
	if err := f.store.UpdateNode(ctx, row); err != nil {
		f.mu.Unlock()
		return err
	}
	m.row = row
	closeClient(m)
	m.reserved = api.Resources{}
	var lost []store.Placement
	for _, p := range f.placed {
		if p.NodeID != nodeID {
			continue
		}
		p.NodeID, p.Epoch, p.Resources = "", 0, api.Resources{}
		lost = append(lost, *p)
	}
	f.notifyLocked()
	sandboxes := f.sandboxes
	f.mu.Unlock()

	slices.SortFunc(lost, func(a, b store.Placement) int { return cmpString(a.SandboxID, b.SandboxID) })
	var firstErr error
	for _, p := range lost {
		if err := f.store.PutPlacement(ctx, p); err != nil && firstErr == nil {
			firstErr = err
		}
		saved := p.SavedAt != nil // a node with a store of its own names no generation
		var reason string
		if saved {
			reason = fmt.Sprintf("node %s %s; it wakes from its save of %s (%d bytes)",
				row.Name, what, p.SavedAt.UTC().Format(time.RFC3339), p.SaveBytes)
		} else {
			reason = fmt.Sprintf("node_lost: node %s %s and the sandbox had no save", row.Name, what)
		}
		if sandboxes == nil {
			continue
		}
		if err := sandboxes.NodeLost(ctx, p.SandboxID, saved, reason); err != nil {
			f.log.Error("settle sandbox of a lost node", "sandbox", p.SandboxID, "node", nodeID, "err", err)
			if firstErr == nil {
				firstErr = err
			}
		}
	}
	return firstErr
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// find resolves a node by ID or by the name of a node that is not
// removed. The caller holds f.mu.
func (f *Fleet) find(ref string) (*member, error) {
	if m := f.nodes[ref]; m != nil {
		return m, nil
	}
	for _, m := range f.nodes {
		if m.row.Name == ref && m.row.State != api.NodeRemoved {
			return m, nil
		}
	}
	return nil, api.Errorf(api.CodeNotFound, "node %s not found", ref)
}

// Drain stops placing new sandboxes on a node; what runs there stays.
func (f *Fleet) Drain(ctx context.Context, ref string) (api.Node, error) {
	return f.setDraining(ctx, ref, true)
}

// Undrain lets a drained node take new sandboxes again.
func (f *Fleet) Undrain(ctx context.Context, ref string) (api.Node, error) {
	return f.setDraining(ctx, ref, false)
}

func (f *Fleet) setDraining(ctx context.Context, ref string, on bool) (api.Node, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	m, err := f.find(ref)
	if err != nil {
		return api.Node{}, err
	}
	from, to := api.NodeReady, api.NodeDraining
	if !on {
		from, to = to, from
	}
	switch m.row.State {
	case to:
		return f.view(m), nil
	case from:
	default:
		return api.Node{}, api.Errorf(api.CodeConflict, "node %s is %s", m.row.Name, m.row.State)
	}
	row := m.row
	row.State = to
	if err := f.store.UpdateNode(ctx, row); err != nil {
		return api.Node{}, err
	}
	m.row = row
	f.notifyLocked()
	return f.view(m), nil
}

// Remove revokes a node: its certificate is refused from now on and its
// sandboxes are settled as a lost node's.
func (f *Fleet) Remove(ctx context.Context, ref string) error {
	f.mu.Lock()
	m, err := f.find(ref)
	f.mu.Unlock()
	if err != nil {
		return err
	}
	if m.row.State == api.NodeRemoved {
		return nil
	}
	return f.retire(ctx, m.row.ID, api.NodeRemoved, "was removed")
}

// Nodes lists every node, removed ones included, oldest first.
func (f *Fleet) Nodes(ctx context.Context) ([]api.Node, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]api.Node, 0, len(f.nodes))
	for _, m := range f.nodes {
		out = append(out, f.view(m))
	}
	slices.SortFunc(out, func(a, b api.Node) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return cmpString(a.ID, b.ID)
	})
	return out, nil
}

// Node returns one node by ID or name.
func (f *Fleet) Node(ctx context.Context, ref string) (api.Node, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	m, err := f.find(ref)
	if err != nil {
		return api.Node{}, err
	}
	return f.view(m), nil
}

// SandboxNode names the node a sandbox is placed on, if any.
func (f *Fleet) SandboxNode(sandboxID string) (api.SandboxNode, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.placed[sandboxID]
	if p == nil || p.NodeID == "" {
		return api.SandboxNode{}, false
	}
	m := f.nodes[p.NodeID]
	if m == nil {
		return api.SandboxNode{}, false
	}
	return api.SandboxNode{ID: m.row.ID, Name: m.row.Name}, true
}

// view is the API's node. The caller holds f.mu.
func (f *Fleet) view(m *member) api.Node {
	n := 0
	for _, p := range f.placed {
		if p.NodeID == m.row.ID {
			n++
		}
	}
	return api.Node{ID: m.row.ID, Name: m.row.Name, State: m.row.State, Addr: m.row.Addr,
		Capacity: m.row.Capacity, Reserved: m.reserved, Sandboxes: n,
		RegisteredAt: m.row.RegisteredAt, CreatedAt: m.row.CreatedAt}
}

func closeClient(m *member) {
	if m.client != nil {
		closeIfCloser(m.client)
		m.client = nil
	}
}

func closeIfCloser(c NodeClient) {
	if cl, ok := c.(io.Closer); ok {
		cl.Close()
	}
}

func setOf(xs []string) map[string]bool {
	m := make(map[string]bool, len(xs))
	for _, x := range xs {
		m[x] = true
	}
	return m
}

func nonNil(xs []string) []string {
	if xs == nil {
		return []string{}
	}
	return xs
}

// notMember is the permission_denied a node that is unknown or removed
// gets; a removed node is told so, for its operator.
func notMember(m *member, nodeID string) error {
	if m != nil {
		return api.Errorf(api.CodePermissionDenied, "node %s (%s) was removed from the fleet (cove nodes rm): its certificate is refused; to bring it back, join it afresh (an empty data dir and a join token)", m.row.Name, nodeID)
	}
	return api.Errorf(api.CodePermissionDenied, "node %s is not a member of this fleet", nodeID)
}
