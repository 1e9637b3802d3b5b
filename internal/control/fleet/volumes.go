package fleet

import (
	"cmp"
	"context"
	"slices"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/node"
)

// A volume's files stay on the node that made them (VolumeRef.Node, the
// node's name): its calls go there, and a sandbox that mounts it is placed
// there.

// CreateVolume makes a volume's disk on the ready node with the largest
// data disk (registered disk_mib; ties by node ID), or the next one when
// that node has no room, and names the node in the answer.
func (f *Fleet) CreateVolume(ctx context.Context, id string, sizeMiB int64) (node.VolumeRef, error) {
	type candidate struct {
		c       NodeClient
		name    string
		diskMiB int64
	}
	f.mu.Lock()
	var cs []candidate
	for _, m := range f.sortedNodes() {
		if m.client != nil && m.row.State == api.NodeReady {
			cs = append(cs, candidate{m.client, m.row.Name, m.row.Capacity.DiskMiB})
		}
	}
	f.mu.Unlock()
	slices.SortStableFunc(cs, func(a, b candidate) int { return cmp.Compare(b.diskMiB, a.diskMiB) })
	if len(cs) == 0 {
		return node.VolumeRef{}, api.Errorf(api.CodeUnavailable, "no node is ready to hold volume %s", id)
	}
	var err error
	for _, c := range cs {
		var ref node.VolumeRef
		ref, err = c.c.CreateVolume(ctx, id, sizeMiB)
		if err == nil {
			ref.Node = c.name
			return ref, nil
		}
		if api.ErrorCode(err) != api.CodeResourceExhausted {
			return node.VolumeRef{}, err
		}
	}
	return node.VolumeRef{}, err
}

// DropVolume removes a volume's disk from the node that holds it.
func (f *Fleet) DropVolume(ctx context.Context, v node.VolumeRef) error {
	c, err := f.volumeNode(v)
	if err != nil {
		return err
	}
	return c.DropVolume(ctx, v)
}

// VolumeUsage measures a volume's disk on the node that holds it.
func (f *Fleet) VolumeUsage(ctx context.Context, v node.VolumeRef) (node.VolumeInfo, error) {
	c, err := f.volumeNode(v)
	if err != nil {
		return node.VolumeInfo{}, err
	}
	return c.VolumeUsage(ctx, v)
}

// volumeNode is the client of the node holding v: unavailable when it is
// not connected.
func (f *Fleet) volumeNode(v node.VolumeRef) (NodeClient, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	m := f.memberNamedLocked(v.Node)
	if m == nil || !m.connected() {
		return nil, api.Errorf(api.CodeUnavailable, "node %q, which holds volume %s, is not connected", v.Node, v.ID)
	}
	return m.client, nil
}

// memberNamedLocked is the node named name, a connected one first (a
// node removed and joined again under its name has a new ID), nil if
// none. The caller holds f.mu.
func (f *Fleet) memberNamedLocked(name string) *member {
	if name == "" {
		return nil
	}
	var found *member
	for _, m := range f.sortedNodes() {
		if m.row.Name == name && (found == nil || m.connected() && !found.connected()) {
			found = m
		}
	}
	return found
}

// volumeHome is the ID of the node a sandbox of spec must be placed on,
// the one holding its volumes ("" when it mounts none): its volumes on
// two nodes answer precondition_failed, their node not connected
// unavailable.
func (f *Fleet) volumeHome(spec node.SandboxSpec) (string, error) {
	name := ""
	for _, v := range spec.Volumes {
		switch {
		case name == "":
			name = v.Node
		case v.Node != name:
			return "", api.Errorf(api.CodePreconditionFailed,
				"sandbox %s mounts volumes on two nodes (%s on %s, %s on %s): a sandbox's volumes must be on one node", spec.ID, spec.Volumes[0].ID, name, v.ID, v.Node)
		}
	}
	if len(spec.Volumes) == 0 {
		return "", nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	m := f.memberNamedLocked(name)
	if m == nil || !m.connected() {
		return "", api.Errorf(api.CodeUnavailable, "node %q, which holds the volumes of sandbox %s, is not connected", name, spec.ID)
	}
	return m.row.ID, nil
}
