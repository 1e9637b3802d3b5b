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
	"github.com/cove-dev/cove/internal/fleet/pki"
	"github.com/cove-dev/cove/internal/id"
	"github.com/cove-dev/cove/internal/store"
)

// Register admits a node: nodeID "" joins a new node by name, as Join
// with no join nonce; otherwise the node registers again with the
// identity its certificate names. Each registration starts a new epoch;
// the answer lists the sandboxes assigned to the node in it. The nodes
// are read from the store, so a registration through any replica sees
// every other's.
func (f *Fleet) Register(ctx context.Context, nodeID string, r fleetwire.Registration) (fleetwire.Admission, error) {
	return f.register(ctx, nodeID, "", r)
}

// Join admits a node by name with the hash of its join nonce ("" for a
// node that sent none). A name registered to a node that is neither lost
// nor removed is refused with conflict, unless that node joined with the
// same nonce and has not been heard with its certificate since: then
// this is the node retrying a join whose answer it never got (through
// this replica or another), and it is admitted again as that node (its
// one row, a new epoch), as a registration with its certificate would
// be. The node's first heartbeat or registration again spends the nonce
// (the store empties the hash): from then on only its certificate speaks
// for it. A lost node's name joined with another nonce is a new
// identity: the lost one is retired.
func (f *Fleet) Join(ctx context.Context, joinHash string, r fleetwire.Registration) (fleetwire.Admission, error) {
	return f.register(ctx, "", joinHash, r)
}

// joinAttempts bounds how often a join reads the nodes again after
// another replica created the name's row between its read and its write.
const joinAttempts = 3

func (f *Fleet) register(ctx context.Context, nodeID, joinHash string, r fleetwire.Registration) (fleetwire.Admission, error) {
	if r.Name == "" || r.Addr == "" {
		return fleetwire.Admission{}, api.Errorf(api.CodeInvalidArgument, "a registration needs the node's name and address")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for attempt := 1; ; attempt++ {
		adm, err := f.registerLocked(ctx, nodeID, joinHash, r)
		if nodeID != "" || joinHash == "" || api.ErrorCode(err) != errRaced || attempt == joinAttempts {
			if api.ErrorCode(err) == errRaced {
				err = nameTaken(r.Name)
			}
			return adm, err
		}
	}
}

// errRaced marks a join whose row another replica created between the
// read of the nodes and the write: read them again.
const errRaced api.Code = "join_raced"

// nameTaken refuses a join of a name a live node holds.
func nameTaken(name string) error {
	return api.Errorf(api.CodeConflict, "a node named %q is already registered, joined by another host (another join nonce); "+
		"a name joins once: give this node another --name, or remove the registered one first (cove nodes rm %s)", name, name)
}

// registerLocked is one attempt of register. The caller holds f.mu.
func (f *Fleet) registerLocked(ctx context.Context, nodeID, joinHash string, r fleetwire.Registration) (fleetwire.Admission, error) {
	now := time.Now()
	rows, err := f.store.ListNodes(ctx)
	if err != nil {
		return fleetwire.Admission{}, err
	}
	var row store.Node
	create := nodeID == ""
	if create {
		for _, o := range rows {
			if o.Name != r.Name || o.State == api.NodeRemoved {
				continue
			}
			if joinHash != "" && o.JoinHash != "" && pki.SameHash(o.JoinHash, joinHash) {
				// The same node again: its first answer was lost.
				row, create = o, false
				f.log.Info("node joins again with its join nonce", "node", o.ID, "name", o.Name, "epoch", o.Epoch)
				break
			}
			if o.State != api.NodeLost {
				return fleetwire.Admission{}, nameTaken(r.Name)
			}
			// A lost node joining afresh is a new identity: the old one
			// is retired (its sandboxes went through the loss path).
			o.State = api.NodeRemoved
			if err := f.store.UpdateNode(ctx, o); err != nil {
				return fleetwire.Admission{}, err
			}
			if m := f.nodes[o.ID]; m != nil {
				m.row = o
				closeClient(m)
			}
		}
		if create {
			row = store.Node{ID: id.New("node"), Name: r.Name, State: api.NodeReady, CreatedAt: now, JoinHash: joinHash}
		}
	} else {
		i := slices.IndexFunc(rows, func(n store.Node) bool { return n.ID == nodeID })
		if i < 0 || rows[i].State == api.NodeRemoved {
			var known *store.Node
			if i >= 0 {
				known = &rows[i]
			}
			return fleetwire.Admission{}, notMember(known, nodeID)
		}
		row = rows[i]
		row.JoinHash = "" // heard with its certificate: its join nonce is spent
		if row.Name != r.Name {
			for _, o := range rows {
				if o.ID != row.ID && o.Name == r.Name && o.State != api.NodeRemoved {
					return fleetwire.Admission{}, api.Errorf(api.CodeConflict, "a node named %q is already registered", r.Name)
				}
			}
		}
	}
	row.Name, row.Addr, row.Epoch, row.RegisteredAt, row.HeartbeatAt = r.Name, r.Addr, row.Epoch+1, &now, &now
	if row.State == api.NodeLost {
		row.State = api.NodeReady
	}
	row.Capacity = nodeCapacity(r.Capacity)
	row.GPUNames, row.Templates = nonNil(slices.Clone(r.Capacity.GPUs.Names)), nonNil(slices.Clone(r.Templates))
	client, err := f.cfg.Dial(row.ID, row.Addr)
	if err != nil {
		return fleetwire.Admission{}, fmt.Errorf("dial node %s at %s: %w", row.ID, row.Addr, err)
	}
	if create {
		err = f.store.CreateNode(ctx, row)
		if api.ErrorCode(err) == api.CodeConflict && joinHash != "" {
			// Another replica stored the name between the read and
			// this write: perhaps this node's own earlier attempt.
			err = api.Errorf(errRaced, "%v", err)
		}
	} else {
		err = f.store.UpdateNode(ctx, row)
	}
	if err != nil {
		closeIfCloser(client)
		return fleetwire.Admission{}, err
	}
	m := f.nodes[row.ID]
	if m == nil {
		m = &member{}
		f.nodes[row.ID] = m
	}
	closeClient(m)
	m.row, m.client, m.dialed, m.templates = row, client, dialKey{row.Epoch, row.Addr}, setOf(row.Templates)
	m.beatAt = now
	// The epoch is the node's now: placements on it move to it.
	ps, err := f.store.ListPlacements(ctx, row.ID)
	if err != nil {
		return fleetwire.Admission{}, err
	}
	assigned := []string{}
	for _, p := range ps {
		p.Epoch = row.Epoch
		if err := f.store.PutPlacement(ctx, p); err != nil {
			return fleetwire.Admission{}, err
		}
		f.placed[p.SandboxID] = &p
		assigned = append(assigned, p.SandboxID)
	}
	sort.Strings(assigned)
	f.queueReattachLocked(row.ID, row.Epoch, assigned)
	f.notifyLocked()
	f.announce(ctx)
	f.log.Info("node registered", "node", row.ID, "name", row.Name, "addr", row.Addr, "epoch", row.Epoch, "assigned", len(assigned))
	return fleetwire.Admission{NodeID: row.ID, Epoch: row.Epoch, Assigned: assigned,
		HeartbeatMS: f.cfg.Heartbeat.Milliseconds()}, nil
}

func nodeCapacity(c fleetwire.Capacity) api.NodeCapacity {
	return api.NodeCapacity{CPUs: c.CPUs, MemoryMiB: c.MemoryMiB, DiskMiB: c.DiskMiB, GPUs: len(c.GPUs.Names), GPUType: c.GPUs.Type}
}

// Heartbeat records that a node is alive, in the store: every replica
// sees it. A stale epoch or a lost node is answered with conflict
// (register again), a removed or unknown one with permission_denied.
func (f *Fleet) Heartbeat(ctx context.Context, nodeID string, hb fleetwire.Heartbeat) (fleetwire.HeartbeatAnswer, error) {
	beat := store.NodeBeat{ID: nodeID, Epoch: hb.Epoch, At: time.Now(), Capacity: nodeCapacity(hb.Capacity),
		GPUNames: nonNil(slices.Clone(hb.Capacity.GPUs.Names)), Templates: nonNil(slices.Clone(hb.Templates))}
	if err := f.store.BeatNode(ctx, beat); err != nil {
		return fleetwire.HeartbeatAnswer{}, f.refusal(ctx, nodeID, hb.Epoch, err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	m := f.nodes[nodeID]
	if m == nil || m.row.Epoch != hb.Epoch {
		// Registered through another replica since the last refresh.
		row, err := f.store.GetNode(ctx, nodeID)
		if err != nil {
			return fleetwire.HeartbeatAnswer{}, err
		}
		if m == nil {
			m = &member{}
			f.nodes[nodeID] = m
		}
		m.row = row
		f.dialLocked(m)
		f.notifyLocked()
	}
	if !f.heard(m.row) {
		f.notifyLocked() // calls waiting for the node go on
	}
	m.beatAt = time.Now()
	m.row.HeartbeatAt, m.row.Capacity, m.row.GPUNames = &beat.At, beat.Capacity, beat.GPUNames
	if t := setOf(beat.Templates); !maps.Equal(t, m.templates) {
		m.row.Templates, m.templates = beat.Templates, t
		f.notifyLocked()
	}
	return fleetwire.HeartbeatAnswer{Epoch: hb.Epoch}, nil
}

// refusal is the answer to a heartbeat the store did not record, in the
// codes the node acts on.
func (f *Fleet) refusal(ctx context.Context, nodeID string, epoch int64, err error) error {
	switch api.ErrorCode(err) {
	case api.CodeNotFound:
		return notMember(nil, nodeID)
	case api.CodeConflict:
	default:
		return err
	}
	row, gerr := f.store.GetNode(ctx, nodeID)
	switch {
	case gerr != nil:
		return gerr
	case row.State == api.NodeRemoved:
		return notMember(&row, nodeID)
	case row.State == api.NodeLost:
		return api.Errorf(api.CodeConflict, "node %s was declared lost; register again", nodeID)
	}
	return api.Errorf(api.CodeConflict, "epoch %d of node %s is stale; register again", epoch, nodeID)
}

// Beating says a node's last heartbeats come to this replica: it is the
// one replica that handles the node's events that must be told once
// (network denials), while every replica hears them. After a failover
// both may, for up to LostAfter: a late heartbeat on a busy host must not
// silence the one replica the node talks to.
func (f *Fleet) Beating(nodeID string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	m := f.nodes[nodeID]
	return m != nil && !m.beatAt.IsZero() && time.Since(m.beatAt) < f.cfg.LostAfter
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
// its certificate no longer admits it. It reads the store: the node may
// have been removed through another replica.
func (f *Fleet) Allowed(ctx context.Context, nodeID string) error {
	n, err := f.store.GetNode(ctx, nodeID)
	switch {
	case api.ErrorCode(err) == api.CodeNotFound:
		return notMember(nil, nodeID)
	case err != nil:
		return err
	case n.State == api.NodeRemoved:
		return notMember(&n, nodeID)
	}
	return nil
}

// Run keeps this replica's view of the fleet fresh until ctx ends: it
// reads the store every Refresh and when poked, and reattaches the
// sandboxes of nodes that registered here. Loss detection is
// RunLossDetection's.
func (f *Fleet) Run(ctx context.Context) error {
	tick := time.NewTicker(f.cfg.Refresh)
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
		case <-f.poke:
		}
		if err := f.Refresh(ctx); err != nil && ctx.Err() == nil {
			f.log.Warn("refresh the fleet from the store", "err", err)
		}
	}
}

// RunLossDetection declares lost every node whose last heartbeat, on any
// replica, is LostAfter old, until ctx ends. One replica runs it (the
// leader): a node is given LostAfter from the moment it starts, so a
// replica that just took over does not count the time no one watched.
func (f *Fleet) RunLossDetection(ctx context.Context) error {
	since := time.Now()
	tick := time.NewTicker(min(time.Second, f.cfg.LostAfter/5))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		f.checkLost(ctx, since)
	}
}

func (f *Fleet) checkLost(ctx context.Context, since time.Time) {
	rows, err := f.store.ListNodes(ctx)
	if err != nil {
		if ctx.Err() == nil {
			f.log.Warn("read the nodes for loss detection", "err", err)
		}
		return
	}
	for _, n := range rows {
		if !f.silent(n, since) {
			continue
		}
		f.log.Warn("node lost", "node", n.ID, "name", n.Name)
		if err := f.retire(ctx, n.ID, api.NodeLost, "was lost", since); err != nil {
			f.log.Error("declare node lost", "node", n.ID, "err", err)
		}
	}
}

// silent says a live node has not been heard of for LostAfter, counted
// from since at the earliest.
func (f *Fleet) silent(n store.Node, since time.Time) bool {
	if n.State != api.NodeReady && n.State != api.NodeDraining {
		return false
	}
	seen := since
	if n.HeartbeatAt != nil && n.HeartbeatAt.After(seen) {
		seen = *n.HeartbeatAt
	}
	return time.Since(seen) >= f.cfg.LostAfter
}

// retire makes a node lost or removed and settles each of its sandboxes
// through the core: asleep from its recorded save, or failed. A loss
// (lostSince not zero) is decided again on the node's row as read now: a
// heartbeat recorded meanwhile, through any replica, keeps it alive.
func (f *Fleet) retire(ctx context.Context, nodeID string, state api.NodeState, what string, lostSince time.Time) error {
	f.mu.Lock()
	row, err := f.store.GetNode(ctx, nodeID)
	if err != nil {
		f.mu.Unlock()
		return err
	}
	if row.State == state || row.State == api.NodeRemoved || (!lostSince.IsZero() && !f.silent(row, lostSince)) {
		f.mu.Unlock()
		return nil
	}
	row.State = state
	if err := f.store.UpdateNode(ctx, row); err != nil {
		f.mu.Unlock()
		return err
	}
	m := f.nodes[nodeID]
	if m == nil {
		m = &member{}
		f.nodes[nodeID] = m
	}
	m.row = row
	closeClient(m)
	m.reserved = api.Resources{}
	f.notifyLocked()
	sandboxes := f.sandboxes
	f.mu.Unlock()
	f.announce(ctx)

	ps, err := f.store.ListPlacements(ctx, nodeID)
	if err != nil {
		return err
	}
	var firstErr error
	for _, p := range ps {
		p.NodeID, p.Epoch, p.Resources = "", 0, api.Resources{}
		if err := f.store.PutPlacement(ctx, p); err != nil && firstErr == nil {
			firstErr = err
		}
		f.mu.Lock()
		f.placed[p.SandboxID] = &p
		f.mu.Unlock()
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
	// Another replica may have changed the node since the last refresh.
	row, err := f.store.GetNode(ctx, m.row.ID)
	if err != nil {
		return api.Node{}, err
	}
	m.row = row
	from, to := api.NodeReady, api.NodeDraining
	if !on {
		from, to = to, from
	}
	switch row.State {
	case to:
		return f.view(m), nil
	case from:
	default:
		return api.Node{}, api.Errorf(api.CodeConflict, "node %s is %s", row.Name, row.State)
	}
	row.State = to
	if err := f.store.UpdateNode(ctx, row); err != nil {
		return api.Node{}, err
	}
	m.row = row
	f.notifyLocked()
	f.announce(ctx)
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
	return f.retire(ctx, m.row.ID, api.NodeRemoved, "was removed", time.Time{})
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
func notMember(n *store.Node, nodeID string) error {
	if n != nil {
		return api.Errorf(api.CodePermissionDenied, "node %s (%s) was removed from the fleet (cove nodes rm): its certificate is refused; to bring it back, join it afresh (an empty data dir and a join token)", n.Name, nodeID)
	}
	return api.Errorf(api.CodePermissionDenied, "node %s is not a member of this fleet", nodeID)
}
