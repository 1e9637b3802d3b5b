package fleet

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/node"
	"github.com/cove-dev/cove/internal/store"
)

// limit is a node's capacity × overcommit: what its placements may
// reserve together.
func (f *Fleet) limit(m *member) api.Resources {
	return api.Resources{
		CPUs:      m.row.Capacity.CPUs * f.cfg.CPUOvercommit,
		MemoryMiB: int64(float64(m.row.Capacity.MemoryMiB) * f.cfg.MemoryOvercommit),
	}
}

// room is what is left of a node for a sandbox of spec, as a share of its
// capacity × overcommit (the larger the freer), or ok false when the
// sandbox does not fit or may not go there. The caller holds f.mu.
func (f *Fleet) room(m *member, spec node.SandboxSpec) (float64, bool) {
	if m.client == nil || m.row.State != api.NodeReady {
		return 0, false
	}
	// An imported image (a "sha256-…" template) is on every node that
	// asks: it fetches it from the shared store by digest.
	if spec.Template != "" && !m.templates[spec.Template] && !strings.HasPrefix(spec.Template, "sha256-") {
		return 0, false
	}
	for _, d := range spec.Devices {
		if !slices.Contains(m.row.GPUNames, d) {
			return 0, false
		}
	}
	l := f.limit(m)
	cpus, mem := l.CPUs, float64(l.MemoryMiB)
	freeCPU := cpus - m.reserved.CPUs - spec.Resources.CPUs
	freeMem := mem - float64(m.reserved.MemoryMiB) - float64(spec.Resources.MemoryMiB)
	if cpus <= 0 || mem <= 0 || freeCPU < -1e-9 || freeMem < 0 {
		return 0, false
	}
	return freeCPU/cpus + freeMem/mem, true
}

// place reserves room for a sandbox on the node with the most room,
// preferring prefer when the sandbox fits there, and records the
// placement. A sandbox placed already keeps its node. The store admits
// the placement only if the node still has room, whatever other replicas
// placed since this one's view was read; a node that refuses is passed
// over for the next.
func (f *Fleet) place(ctx context.Context, spec node.SandboxSpec, prefer string) (*member, error) {
	// A sandbox that mounts volumes goes where they are, and nowhere else.
	home, err := f.volumeHome(spec)
	if err != nil {
		return nil, err
	}
	p, placed, err := f.placement(ctx, spec.ID)
	if err != nil {
		return nil, err
	}
	if placed && p.NodeID != "" && home != "" && p.NodeID != home {
		return nil, api.Errorf(api.CodePreconditionFailed, "sandbox %s is placed on another node than its volumes", spec.ID)
	}
	if placed && p.NodeID != "" {
		f.mu.Lock()
		m := f.nodes[p.NodeID]
		f.mu.Unlock()
		if m != nil {
			return m, nil
		}
	}
	if !placed {
		p = store.Placement{SandboxID: spec.ID}
	}
	refused := map[string]bool{}
	if home != "" {
		prefer = home
	}
	refreshed := false
	for {
		if home != "" {
			// Every other node is passed over, those a refresh adds too.
			f.mu.Lock()
			for id := range f.nodes {
				refused[id] = refused[id] || id != home
			}
			f.mu.Unlock()
		}
		m := f.choose(spec, prefer, refused)
		if m == nil && !refreshed {
			// The view may be behind the store: room that other replicas
			// gave back since the last refresh is not in it yet. It is
			// read again once before the answer is no.
			refreshed = true
			if err := f.Refresh(ctx); err != nil {
				return nil, err
			}
			continue
		}
		if m == nil {
			return nil, api.Errorf(api.CodeResourceExhausted,
				"no node has room for %g CPUs and %d MiB of template %s now", spec.Resources.CPUs, spec.Resources.MemoryMiB, spec.Template)
		}
		np := p
		f.mu.Lock()
		np.NodeID, np.Epoch, np.Resources = m.row.ID, m.row.Epoch, spec.Resources
		limit := f.limit(m)
		f.mu.Unlock()
		err := f.store.AdmitPlacement(ctx, np, limit)
		f.mu.Lock()
		if err == nil {
			f.placed[spec.ID] = &np
			f.mu.Unlock()
			return m, nil
		}
		// choose reserved the room in the view: give it back.
		m.reserved = add(m.reserved, spec.Resources, -1)
		f.mu.Unlock()
		switch api.ErrorCode(err) {
		case api.CodeResourceExhausted, api.CodeConflict, api.CodeNotFound:
			refused[m.row.ID] = true
		default:
			return nil, err
		}
	}
}

// choose picks the node for a sandbox of spec among those not refused
// (prefer if the sandbox fits there, else the one with the most room) and
// reserves the sandbox's room on it in the view, so that placements made
// at once here spread; nil when none fits.
func (f *Fleet) choose(spec node.SandboxSpec, prefer string, refused map[string]bool) *member {
	f.mu.Lock()
	defer f.mu.Unlock()
	var best *member
	var bestRoom float64
	if m := f.nodes[prefer]; m != nil && !refused[prefer] {
		if _, ok := f.room(m, spec); ok {
			best = m
		}
	}
	if best == nil {
		for _, m := range f.sortedNodes() {
			if refused[m.row.ID] {
				continue
			}
			if r, ok := f.room(m, spec); ok && (best == nil || r > bestRoom) {
				best, bestRoom = m, r
			}
		}
	}
	if best != nil {
		best.reserved = add(best.reserved, spec.Resources, 1)
	}
	return best
}

// placement reads a sandbox's placement from the store (any replica may
// have changed it) and caches it; ok is false when it has none.
func (f *Fleet) placement(ctx context.Context, sandboxID string) (store.Placement, bool, error) {
	p, err := f.store.GetPlacement(ctx, sandboxID)
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case api.ErrorCode(err) == api.CodeNotFound:
		delete(f.placed, sandboxID)
		return store.Placement{}, false, nil
	case err != nil:
		return store.Placement{}, false, err
	}
	f.placed[sandboxID] = &p
	return p, true, nil
}

// sortedNodes are the nodes by ID, so ties go the same way every time.
// The caller holds f.mu.
func (f *Fleet) sortedNodes() []*member {
	ms := make([]*member, 0, len(f.nodes))
	for _, m := range f.nodes {
		ms = append(ms, m)
	}
	slices.SortFunc(ms, func(a, b *member) int { return cmpString(a.row.ID, b.row.ID) })
	return ms
}

// release frees a sandbox's reservation; forget also drops its placement
// and recorded save, else they stay for a later wake.
func (f *Fleet) release(ctx context.Context, sandboxID string, forget bool) error {
	p, ok, err := f.placement(ctx, sandboxID)
	if err != nil || !ok {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if m := f.nodes[p.NodeID]; m != nil && p.NodeID != "" {
		m.reserved = add(m.reserved, p.Resources, -1)
	}
	if forget {
		delete(f.placed, sandboxID)
		return f.store.DeletePlacement(ctx, sandboxID)
	}
	p.NodeID, p.Epoch, p.Resources = "", 0, api.Resources{}
	f.placed[sandboxID] = &p
	return f.store.PutPlacement(ctx, p)
}

// recordSave keeps the generation a sleep on nodeID in epoch wrote, only
// if that node still holds the sandbox in that epoch (a zombie's save
// never wins), and frees the sandbox's reservation: asleep, it reserves
// nothing.
func (f *Fleet) recordSave(ctx context.Context, sandboxID, nodeID string, epoch int64, info node.SaveInfo) error {
	p, ok, err := f.placement(ctx, sandboxID)
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	m := f.nodes[nodeID]
	if m == nil || !m.connected() {
		return errLost(nodeID)
	}
	if !ok || p.NodeID != nodeID || p.Epoch != epoch || m.row.Epoch != epoch {
		return api.Errorf(api.CodeUnavailable, "node %s registered again while the sandbox slept; that save is not used", m.row.Name)
	}
	t := time.Now()
	np := p
	np.Save, np.SaveNodeID, np.SaveBytes, np.SavedAt = info.Generation, nodeID, info.ArchiveBytes, &t
	np.NodeID, np.Epoch, np.Resources = "", 0, api.Resources{}
	if err := f.store.PutPlacement(ctx, np); err != nil {
		return err
	}
	m.reserved = add(m.reserved, p.Resources, -1)
	f.placed[sandboxID] = &np
	return nil
}
