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
		if !slices.Contains(m.capacity.GPUs.Names, d) {
			return 0, false
		}
	}
	cpus := m.capacity.CPUs * f.cfg.CPUOvercommit
	mem := float64(m.capacity.MemoryMiB) * f.cfg.MemoryOvercommit
	freeCPU := cpus - m.reserved.CPUs - spec.Resources.CPUs
	freeMem := mem - float64(m.reserved.MemoryMiB) - float64(spec.Resources.MemoryMiB)
	if cpus <= 0 || mem <= 0 || freeCPU < -1e-9 || freeMem < 0 {
		return 0, false
	}
	return freeCPU/cpus + freeMem/mem, true
}

// place reserves room for a sandbox on the node with the most room,
// preferring prefer when the sandbox fits there, and records the
// placement. A sandbox placed already keeps its node.
func (f *Fleet) place(ctx context.Context, spec node.SandboxSpec, prefer string) (*member, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.placed[spec.ID]
	if p != nil && p.NodeID != "" {
		if m := f.nodes[p.NodeID]; m != nil {
			return m, nil
		}
	}
	var best *member
	var bestRoom float64
	if m := f.nodes[prefer]; m != nil {
		if _, ok := f.room(m, spec); ok {
			best = m
		}
	}
	if best == nil {
		for _, m := range f.sortedNodes() {
			if r, ok := f.room(m, spec); ok && (best == nil || r > bestRoom) {
				best, bestRoom = m, r
			}
		}
	}
	if best == nil {
		return nil, api.Errorf(api.CodeResourceExhausted,
			"no node has room for %g CPUs and %d MiB of template %s now", spec.Resources.CPUs, spec.Resources.MemoryMiB, spec.Template)
	}
	np := store.Placement{SandboxID: spec.ID}
	if p != nil {
		np = *p
	}
	np.NodeID, np.Epoch, np.Resources = best.row.ID, best.row.Epoch, spec.Resources
	if err := f.store.PutPlacement(ctx, np); err != nil {
		return nil, err
	}
	f.placed[spec.ID] = &np
	best.reserved = add(best.reserved, spec.Resources, 1)
	return best, nil
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
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.placed[sandboxID]
	if p == nil {
		return nil
	}
	if m := f.nodes[p.NodeID]; m != nil && p.NodeID != "" {
		m.reserved = add(m.reserved, p.Resources, -1)
	}
	if forget {
		delete(f.placed, sandboxID)
		return f.store.DeletePlacement(ctx, sandboxID)
	}
	p.NodeID, p.Epoch, p.Resources = "", 0, api.Resources{}
	return f.store.PutPlacement(ctx, *p)
}

// recordSave keeps the generation a sleep on nodeID in epoch wrote, only
// if that node still holds the sandbox in that epoch (a zombie's save
// never wins), and frees the sandbox's reservation: asleep, it reserves
// nothing.
func (f *Fleet) recordSave(ctx context.Context, sandboxID, nodeID string, epoch int64, info node.SaveInfo) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.placed[sandboxID]
	m := f.nodes[nodeID]
	if m == nil || !m.connected() {
		return errLost(nodeID)
	}
	if p == nil || p.NodeID != nodeID || p.Epoch != epoch || m.row.Epoch != epoch {
		return api.Errorf(api.CodeUnavailable, "node %s registered again while the sandbox slept; that save is not used", m.row.Name)
	}
	t := time.Now()
	np := *p
	np.Save, np.SaveNodeID, np.SaveBytes, np.SavedAt = info.Generation, nodeID, info.ArchiveBytes, &t
	np.NodeID, np.Epoch, np.Resources = "", 0, api.Resources{}
	if err := f.store.PutPlacement(ctx, np); err != nil {
		return err
	}
	m.reserved = add(m.reserved, p.Resources, -1)
	*p = np
	return nil
}
