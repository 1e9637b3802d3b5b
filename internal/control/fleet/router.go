package fleet

import (
	"context"
	"errors"
	"io"
	"maps"
	"math"
	"net"
	"slices"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/node"
	"github.com/cove-dev/cove/internal/store"
)

// route finds the client of the node that holds a sandbox, reading the
// sandbox's placement from the store: another replica may have placed,
// moved or put it to sleep. With wait, a node not heard of since this
// replica started (a restart, or a replica new to the fleet) is waited
// for until LostAfter has passed since then (or ctx ends): it heartbeats
// through any replica, or is left to the loss path. A sandbox whose node
// is lost, removed or never heard of again answers an error whose
// NodeLost method says so.
func (f *Fleet) route(ctx context.Context, sandboxID string, wait bool) (NodeClient, string, int64, error) {
	for {
		p, ok, err := f.placement(ctx, sandboxID)
		if err != nil {
			return nil, "", 0, err
		}
		if !ok {
			return nil, "", 0, api.Errorf(api.CodeNotFound, "sandbox %s is placed on no node", sandboxID)
		}
		if p.NodeID == "" {
			return nil, "", 0, lostError{api.Errorf(api.CodeUnavailable, "sandbox %s has no node now", sandboxID)}
		}
		f.mu.Lock()
		m := f.nodes[p.NodeID]
		f.mu.Unlock()
		if m == nil {
			// A node registered through another replica since the last
			// refresh.
			if err := f.refreshNode(ctx, p.NodeID); err != nil {
				return nil, "", 0, err
			}
		}
		f.mu.Lock()
		m = f.nodes[p.NodeID]
		if m == nil || !m.connected() {
			f.mu.Unlock()
			return nil, "", 0, errLost(p.NodeID)
		}
		if !wait || f.heard(m.row) {
			c, id, epoch := m.client, m.row.ID, m.row.Epoch
			f.mu.Unlock()
			return c, id, epoch, nil
		}
		left := time.Until(f.started.Add(f.cfg.LostAfter))
		changed, name := f.changed, m.row.Name
		f.mu.Unlock()
		if left <= 0 {
			return nil, "", 0, errLost(name)
		}
		// The heartbeat may come through another replica: the node's
		// row is read again every so often.
		t := time.NewTimer(min(left, heardPoll))
		select {
		case <-changed:
			t.Stop()
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, "", 0, context.Cause(ctx)
		}
		if err := f.refreshNode(ctx, p.NodeID); err != nil {
			return nil, "", 0, err
		}
	}
}

// heardPoll is how often a call waiting for a node not heard of since
// this replica started reads the node's row again.
const heardPoll = 250 * time.Millisecond

// heard says a node was heard of (registered or heartbeat, through any
// replica) since this replica started. The caller holds f.mu.
func (f *Fleet) heard(row store.Node) bool {
	return row.HeartbeatAt != nil && !row.HeartbeatAt.Before(f.started)
}

// refreshNode reads one node's row from the store into the view, and
// dials it if it is live.
func (f *Fleet) refreshNode(ctx context.Context, nodeID string) error {
	row, err := f.store.GetNode(ctx, nodeID)
	if api.ErrorCode(err) == api.CodeNotFound {
		return nil
	}
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	m := f.nodes[nodeID]
	if m == nil {
		m = &member{}
		f.nodes[nodeID] = m
	}
	if row.Epoch < m.row.Epoch {
		return nil // read before a registration this replica made since
	}
	if m.row.State != row.State || m.row.Epoch != row.Epoch {
		f.notifyLocked()
	}
	m.row, m.templates = row, setOf(row.Templates)
	f.dialLocked(m)
	return nil
}

// client is route for the calls that carry no context: they never wait.
func (f *Fleet) client(sandboxID string) (NodeClient, error) {
	c, _, _, err := f.route(context.Background(), sandboxID, false)
	return c, err
}

// connected are the clients of the nodes registered with this process.
func (f *Fleet) connected() []NodeClient {
	f.mu.Lock()
	defer f.mu.Unlock()
	var cs []NodeClient
	for _, m := range f.sortedNodes() {
		if m.connected() {
			cs = append(cs, m.client)
		}
	}
	return cs
}

// saveHolder is the node to ask for a sandbox's save when it runs
// nowhere: the node that holds or wrote it if it is connected, else a
// connected node, ready ones first (a fleet shares one save store). It
// answers that node's client and ID, or a nil client when none is
// connected.
func (f *Fleet) saveHolder(sandboxID string) (NodeClient, string) {
	p, ok, _ := f.placement(context.Background(), sandboxID)
	f.mu.Lock()
	defer f.mu.Unlock()
	if ok {
		for _, id := range []string{p.NodeID, p.SaveNodeID} {
			if m := f.nodes[id]; m != nil && m.connected() {
				return m.client, id
			}
		}
	}
	for _, ready := range []bool{true, false} {
		for _, m := range f.sortedNodes() {
			if m.connected() && (!ready || m.row.State == api.NodeReady) {
				return m.client, m.row.ID
			}
		}
	}
	return nil, ""
}

// Admit places a sandbox on the node with the most room and asks that node
// to admit it; a node that refuses gives its reservation back.
func (f *Fleet) Admit(ctx context.Context, spec node.SandboxSpec) error {
	if _, err := f.place(ctx, spec, ""); err != nil {
		return err
	}
	c, _, _, err := f.route(ctx, spec.ID, false)
	if err == nil {
		err = c.Admit(ctx, spec)
	}
	if err != nil {
		if rerr := f.release(ctx, spec.ID, true); rerr != nil {
			f.log.Error("give back a refused placement", "sandbox", spec.ID, "err", rerr)
		}
	}
	return err
}

// Start starts a sandbox on its node, placing it first if Admit did not.
func (f *Fleet) Start(ctx context.Context, spec node.SandboxSpec) error {
	if _, err := f.place(ctx, spec, ""); err != nil {
		return err
	}
	c, _, _, err := f.route(ctx, spec.ID, true)
	if err != nil {
		return err
	}
	return c.Start(ctx, spec)
}

// Wake places an asleep sandbox, on the node it slept on if that node has
// room, and wakes it there from its recorded save.
func (f *Fleet) Wake(ctx context.Context, spec node.SandboxSpec) error {
	var home string
	p, ok, err := f.placement(ctx, spec.ID)
	if err != nil {
		return err
	}
	if ok {
		spec.Save, home = p.Save, p.SaveNodeID
		if p.NodeID != "" {
			home = p.NodeID
		}
	}
	if _, err := f.place(ctx, spec, home); err != nil {
		return err
	}
	c, _, _, err := f.route(ctx, spec.ID, true)
	if err != nil {
		return err
	}
	return c.Wake(ctx, spec)
}

// Attach resumes a sandbox that ran before a restart, on its node.
func (f *Fleet) Attach(ctx context.Context, spec node.SandboxSpec, running []string) error {
	c, _, _, err := f.route(ctx, spec.ID, true)
	if err != nil {
		return err
	}
	return c.Attach(ctx, spec, running)
}

// Destroy removes everything of a sandbox, its save included, and forgets
// its placement. A sandbox placed nowhere is destroyed on every connected
// node (an orphan's leftovers).
func (f *Fleet) Destroy(ctx context.Context, id string) error {
	c, _, _, err := f.route(ctx, id, true)
	switch {
	case err == nil:
		err = c.Destroy(ctx, id)
	case isLost(err):
		// Its node is gone; the save, if any, is removed through another.
		if h, _ := f.saveHolder(id); h != nil {
			err = h.Destroy(ctx, id)
		} else {
			err = nil
		}
	case api.ErrorCode(err) == api.CodeNotFound:
		err = nil
		for _, c := range f.connected() {
			if derr := c.Destroy(ctx, id); derr != nil && err == nil {
				err = derr
			}
		}
	}
	if err != nil {
		return err
	}
	return f.release(ctx, id, true)
}

// DestroyRuntime removes a sandbox's runtime, keeping its save; the
// sandbox reserves nothing afterwards.
func (f *Fleet) DestroyRuntime(ctx context.Context, id string) error {
	c, _, _, err := f.route(ctx, id, true)
	switch {
	case err == nil:
		if err := c.DestroyRuntime(ctx, id); err != nil {
			return err
		}
	case isLost(err), api.ErrorCode(err) == api.CodeNotFound:
		// No node runs it: nothing to remove.
	default:
		return err
	}
	return f.release(ctx, id, false)
}

// FinishSleep saves a sandbox on its node and records the generation
// written, if the node still holds the sandbox in the same epoch.
func (f *Fleet) FinishSleep(ctx context.Context, id string) (node.SaveInfo, error) {
	c, nodeID, epoch, err := f.route(ctx, id, true)
	if err != nil {
		return node.SaveInfo{}, err
	}
	info, err := c.FinishSleep(ctx, id)
	if err != nil {
		return info, err
	}
	if err := f.recordSave(ctx, id, nodeID, epoch, info); err != nil {
		return node.SaveInfo{}, err
	}
	return info, nil
}

// DropSave removes a sandbox's save and forgets its recorded generation.
func (f *Fleet) DropSave(ctx context.Context, id string) error {
	h, _ := f.saveHolder(id)
	if h == nil {
		return api.Errorf(api.CodeUnavailable, "no node is connected to remove the save of %s", id)
	}
	if err := h.DropSave(ctx, id); err != nil {
		return err
	}
	p, ok, err := f.placement(ctx, id)
	if err != nil || !ok {
		return err
	}
	p.Save, p.SaveNodeID, p.SaveBytes, p.SavedAt = "", "", 0, nil
	if err := f.store.PutPlacement(ctx, p); err != nil {
		return err
	}
	f.mu.Lock()
	f.placed[id] = &p
	f.mu.Unlock()
	return nil
}

// CopySave copies the save named from as the save named to, on the node
// that holds from's save, and records the copy's generation for to.
func (f *Fleet) CopySave(ctx context.Context, from, to string) (node.SaveInfo, error) {
	h, holderID := f.saveHolder(from)
	if h == nil {
		return node.SaveInfo{}, api.Errorf(api.CodeUnavailable, "no node is connected to copy the save of %s", from)
	}
	info, err := h.CopySave(ctx, from, to)
	if err != nil {
		return info, err
	}
	np, ok, err := f.placement(ctx, to)
	if err != nil {
		return info, err
	}
	if !ok {
		np = store.Placement{SandboxID: to}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	t := time.Now()
	np.Save, np.SaveNodeID, np.SaveBytes, np.SavedAt = info.Generation, holderID, info.ArchiveBytes, &t
	if err := f.store.PutPlacement(ctx, np); err != nil {
		return info, err
	}
	f.placed[to] = &np
	return info, nil
}

// Snapshot freezes a sandbox's files as a snapshot: on the node that runs
// it, or, asleep, on the node that holds its save (the store is shared).
func (f *Fleet) Snapshot(ctx context.Context, id, snap string, asleep bool, save string) (node.SaveInfo, error) {
	if asleep {
		h, _ := f.saveHolder(id)
		if h == nil {
			return node.SaveInfo{}, api.Errorf(api.CodeUnavailable, "no node is connected to copy the save of %s", id)
		}
		if save == "" {
			if p, ok, err := f.placement(ctx, id); err == nil && ok {
				save = p.Save
			}
		}
		return h.Snapshot(ctx, id, snap, true, save)
	}
	c, _, _, err := f.route(ctx, id, true)
	if err != nil {
		return node.SaveInfo{}, err
	}
	return c.Snapshot(ctx, id, snap, false, "")
}

// DropSnapshot removes a snapshot from the shared store and from every
// connected node's layers (a node that is away keeps its copy until it
// is asked again).
func (f *Fleet) DropSnapshot(ctx context.Context, snap string) error {
	cs := f.connected()
	if len(cs) == 0 {
		return api.Errorf(api.CodeUnavailable, "no node is connected to remove snapshot %s", snap)
	}
	var errs []error
	for _, c := range cs {
		if err := c.DropSnapshot(ctx, snap); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Known lists the sandboxes the connected nodes hold state for.
func (f *Fleet) Known(ctx context.Context) ([]string, error) {
	seen := map[string]bool{}
	for _, c := range f.connected() {
		ids, err := c.Known(ctx)
		if err != nil {
			return nil, err
		}
		for _, id := range ids {
			seen[id] = true
		}
	}
	return slices.Sorted(maps.Keys(seen)), nil
}

// Lose records commands of a sandbox as lost on its node.
func (f *Fleet) Lose(id string, commands []string) {
	if c, err := f.client(id); err == nil {
		c.Lose(id, commands)
	}
}

// SetPolicy changes a sandbox's network policy on its node.
func (f *Fleet) SetPolicy(id string, p api.NetworkPolicy) error {
	c, err := f.client(id)
	if err != nil {
		return err
	}
	return c.SetPolicy(id, p)
}

// SetInjectSecrets replaces the secrets a sandbox's node injects for it.
func (f *Fleet) SetInjectSecrets(id string, inject []node.InjectSecret) error {
	c, err := f.client(id)
	if err != nil {
		return err
	}
	return c.SetInjectSecrets(id, inject)
}

// UseSetupPolicy switches a sandbox to its setup policy or back.
func (f *Fleet) UseSetupPolicy(id string, on bool) {
	if c, err := f.client(id); err == nil {
		c.UseSetupPolicy(id, on)
	}
}

// SetHostname renames a sandbox's host on its node.
func (f *Fleet) SetHostname(ctx context.Context, id, name string) error {
	c, _, _, err := f.route(ctx, id, true)
	if err != nil {
		return err
	}
	return c.SetHostname(ctx, id, name)
}

// DrainObservations hands over the network reports of every connected
// node.
func (f *Fleet) DrainObservations() []node.Observation {
	var out []node.Observation
	for _, c := range f.connected() {
		out = append(out, c.DrainObservations()...)
	}
	return out
}

// PendingObservations are a sandbox's network reports its node has not
// handed over yet.
func (f *Fleet) PendingObservations(id string) []api.NetworkObservation {
	c, err := f.client(id)
	if err != nil {
		return nil
	}
	return c.PendingObservations(id)
}

// Stats reads the counters of sandboxes from the nodes they run on.
func (f *Fleet) Stats(ctx context.Context, ids []string) map[string]node.Stats {
	type batch struct {
		client NodeClient
		ids    []string
	}
	byNode := map[string]*batch{}
	f.mu.Lock()
	for _, id := range ids {
		if p := f.placed[id]; p != nil {
			if m := f.nodes[p.NodeID]; m != nil && m.connected() {
				b := byNode[p.NodeID]
				if b == nil {
					b = &batch{client: m.client}
					byNode[p.NodeID] = b
				}
				b.ids = append(b.ids, id)
			}
		}
	}
	f.mu.Unlock()
	out := map[string]node.Stats{}
	for _, b := range byNode {
		maps.Copy(out, b.client.Stats(ctx, b.ids))
	}
	return out
}

// GPUs are the GPUs of the ready node that has the most of them: a
// workload that asks for GPUs is placed on a node that has the devices it
// was given.
func (f *Fleet) GPUs() node.GPUs {
	f.mu.Lock()
	defer f.mu.Unlock()
	var best node.GPUs
	for _, m := range f.sortedNodes() {
		if m.client != nil && m.row.State == api.NodeReady && len(m.row.GPUNames) > len(best.Names) {
			best = node.GPUs{Type: m.row.Capacity.GPUType, Names: slices.Clone(m.row.GPUNames)}
		}
	}
	return best
}

func isLost(err error) bool {
	var l interface{ NodeLost() bool }
	return errors.As(err, &l) && l.NodeLost()
}

// The calls below go to the sandbox's node unchanged.

func (f *Fleet) Publish(ctx context.Context, id string, ports []int) error {
	c, _, _, err := f.route(ctx, id, true)
	if err != nil {
		return err
	}
	return c.Publish(ctx, id, ports)
}

func (f *Fleet) PublishPort(ctx context.Context, id string, port int) error {
	c, _, _, err := f.route(ctx, id, true)
	if err != nil {
		return err
	}
	return c.PublishPort(ctx, id, port)
}

func (f *Fleet) UnpublishPort(ctx context.Context, id string, port int) error {
	c, _, _, err := f.route(ctx, id, true)
	if err != nil {
		return err
	}
	return c.UnpublishPort(ctx, id, port)
}

func (f *Fleet) DialPort(ctx context.Context, id string, port int) (net.Conn, error) {
	c, _, _, err := f.route(ctx, id, true)
	if err != nil {
		return nil, err
	}
	return c.DialPort(ctx, id, port)
}

func (f *Fleet) Exec(ctx context.Context, id string, spec node.ExecSpec) (node.Started, error) {
	c, _, _, err := f.route(ctx, id, true)
	if err != nil {
		return node.Started{}, err
	}
	return c.Exec(ctx, id, spec)
}

// Output reads a command's recorded output from the sandbox's node. A
// sandbox placed nowhere (asleep, or a workload that ended) keeps its
// output on the node that ran it: the node that wrote its save is asked
// first, then every connected node, and the first that has it answers.
func (f *Fleet) Output(id, commandID string) (node.Output, error) {
	holders, nowhere := f.outputHolders(id)
	if !nowhere {
		c, err := f.client(id)
		if err != nil {
			return nil, err
		}
		return c.Output(id, commandID)
	}
	for _, c := range holders {
		o, err := c.Output(id, commandID)
		if err == nil {
			// A remote output opens lazily: a read past its end says
			// whether this node holds it.
			if err = holds(o); err != nil {
				o.Close()
			}
		}
		if api.ErrorCode(err) == api.CodeNotFound {
			continue
		}
		return o, err
	}
	return nil, api.Errorf(api.CodeNotFound, "the output of command %s is on no connected node", commandID)
}

// holds reads an output past its last chunk: not_found when the node that
// gave it holds none.
func holds(o node.Output) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := o.Read(ctx, math.MaxInt64, false, func(node.Chunk) error { return nil })
	return err
}

// outputHolders are the connected nodes that may hold the output of a
// sandbox placed nowhere, the one that wrote its save first; nowhere is
// false while the sandbox is placed on a node (or unknown).
func (f *Fleet) outputHolders(id string) (holders []NodeClient, nowhere bool) {
	p, ok, _ := f.placement(context.Background(), id)
	if !ok || p.NodeID != "" {
		return nil, false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if m := f.nodes[p.SaveNodeID]; m != nil && m.connected() {
		holders = append(holders, m.client)
	}
	for _, m := range f.sortedNodes() {
		if m.connected() && m.row.ID != p.SaveNodeID {
			holders = append(holders, m.client)
		}
	}
	return holders, true
}

func (f *Fleet) Stdin(ctx context.Context, id, commandID string, r io.Reader, eof bool) error {
	c, _, _, err := f.route(ctx, id, true)
	if err != nil {
		return err
	}
	return c.Stdin(ctx, id, commandID, r, eof)
}

func (f *Fleet) Signal(ctx context.Context, id, commandID, sig string) error {
	c, _, _, err := f.route(ctx, id, true)
	if err != nil {
		return err
	}
	return c.Signal(ctx, id, commandID, sig)
}

func (f *Fleet) Resize(ctx context.Context, id, commandID string, size node.TermSize) error {
	c, _, _, err := f.route(ctx, id, true)
	if err != nil {
		return err
	}
	return c.Resize(ctx, id, commandID, size)
}

func (f *Fleet) StatFile(ctx context.Context, id, path string) (api.FileEntry, error) {
	c, _, _, err := f.route(ctx, id, true)
	if err != nil {
		return api.FileEntry{}, err
	}
	return c.StatFile(ctx, id, path)
}

func (f *Fleet) ListFiles(ctx context.Context, id string, spec node.ListSpec) (api.List[api.FileEntry], error) {
	c, _, _, err := f.route(ctx, id, true)
	if err != nil {
		return api.List[api.FileEntry]{}, err
	}
	return c.ListFiles(ctx, id, spec)
}

func (f *Fleet) ReadFile(ctx context.Context, id string, spec node.ReadSpec) (*node.Content, error) {
	c, _, _, err := f.route(ctx, id, true)
	if err != nil {
		return nil, err
	}
	return c.ReadFile(ctx, id, spec)
}

func (f *Fleet) WriteFile(ctx context.Context, id string, spec node.WriteSpec, body io.Reader) (api.FileEntry, bool, error) {
	c, _, _, err := f.route(ctx, id, true)
	if err != nil {
		return api.FileEntry{}, false, err
	}
	return c.WriteFile(ctx, id, spec, body)
}

func (f *Fleet) EditFile(ctx context.Context, id string, spec node.EditSpec) (api.FileEntry, error) {
	c, _, _, err := f.route(ctx, id, true)
	if err != nil {
		return api.FileEntry{}, err
	}
	return c.EditFile(ctx, id, spec)
}

func (f *Fleet) Mkdir(ctx context.Context, id string, spec node.MkdirSpec) (api.FileEntry, error) {
	c, _, _, err := f.route(ctx, id, true)
	if err != nil {
		return api.FileEntry{}, err
	}
	return c.Mkdir(ctx, id, spec)
}

func (f *Fleet) MoveFile(ctx context.Context, id string, spec node.MoveSpec) (api.FileEntry, error) {
	c, _, _, err := f.route(ctx, id, true)
	if err != nil {
		return api.FileEntry{}, err
	}
	return c.MoveFile(ctx, id, spec)
}

func (f *Fleet) RemoveFile(ctx context.Context, id, path string, recursive bool) error {
	c, _, _, err := f.route(ctx, id, true)
	if err != nil {
		return err
	}
	return c.RemoveFile(ctx, id, path, recursive)
}

func (f *Fleet) ReadArchive(ctx context.Context, id, path string) (io.ReadCloser, error) {
	c, _, _, err := f.route(ctx, id, true)
	if err != nil {
		return nil, err
	}
	return c.ReadArchive(ctx, id, path)
}

func (f *Fleet) WriteArchive(ctx context.Context, id string, spec node.ArchiveSpec, body io.Reader) (api.ArchiveResult, error) {
	c, _, _, err := f.route(ctx, id, true)
	if err != nil {
		return api.ArchiveResult{}, err
	}
	return c.WriteArchive(ctx, id, spec, body)
}

func (f *Fleet) CloneGit(ctx context.Context, id string, spec node.GitSpec) (string, error) {
	c, _, _, err := f.route(ctx, id, true)
	if err != nil {
		return "", err
	}
	return c.CloneGit(ctx, id, spec)
}

// WatchFiles reads a file watch's journal on the sandbox's node.
func (f *Fleet) WatchFiles(ctx context.Context, id string, spec node.WatchSpec) (node.FileWatch, error) {
	c, _, _, err := f.route(ctx, id, true)
	if err != nil {
		return nil, err
	}
	return c.WatchFiles(ctx, id, spec)
}
