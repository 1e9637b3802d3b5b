package nodetest

import (
	"context"
	"slices"
	"strings"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/node"
)

// volume is what the fake keeps of a volume: its size and what a test
// says it uses (SetVolumeUsed).
type volume struct {
	sizeMiB int64
	used    int64
}

// Volumes lists the volumes the fake holds, sorted.
func (n *Node) Volumes() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var ids []string
	for id := range n.volumes {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// SetVolumeUsed sets the bytes volume id uses: at its size it is full.
func (n *Node) SetVolumeUsed(id string, used int64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if v := n.volumes[id]; v != nil {
		v.used = used
	}
}

// CreateVolume implements lifecycle.Node; it is idempotent.
func (n *Node) CreateVolume(ctx context.Context, id string, sizeMiB int64) (node.VolumeRef, error) {
	if err := n.record("create-volume", id); err != nil {
		return node.VolumeRef{}, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.volumes == nil {
		n.volumes = map[string]*volume{}
	}
	if n.volumes[id] == nil {
		n.volumes[id] = &volume{sizeMiB: sizeMiB}
	}
	return node.VolumeRef{ID: id}, nil
}

// DropVolume implements lifecycle.Node: a volume a running sandbox
// mounts is refused, a missing one is no error.
func (n *Node) DropVolume(ctx context.Context, v node.VolumeRef) error {
	if err := n.record("drop-volume", v.ID); err != nil {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	var users []string
	for id, s := range n.sandboxes {
		if s.State != Running {
			continue
		}
		for _, m := range s.Spec.Volumes {
			if m.ID == v.ID {
				users = append(users, id)
				break
			}
		}
	}
	if len(users) > 0 {
		slices.Sort(users)
		return api.Errorf(api.CodePreconditionFailed, "volume %s is mounted by sandboxes %s", v.ID, strings.Join(users, ", "))
	}
	delete(n.volumes, v.ID)
	return nil
}

// VolumeUsage implements lifecycle.Node.
func (n *Node) VolumeUsage(ctx context.Context, v node.VolumeRef) (node.VolumeInfo, error) {
	if err := n.record("volume-usage", v.ID); err != nil {
		return node.VolumeInfo{}, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	vol := n.volumes[v.ID]
	if vol == nil {
		return node.VolumeInfo{}, api.Errorf(api.CodeNotFound, "volume %s is not on this node", v.ID)
	}
	size := vol.sizeMiB << 20
	return node.VolumeInfo{SizeBytes: size, UsedBytes: min(vol.used, size), Full: vol.used >= size}, nil
}

// haveVolumesLocked refuses a start or wake that mounts a volume the
// fake does not hold, as a node does (not_found). The caller holds n.mu.
func (n *Node) haveVolumesLocked(spec node.SandboxSpec) error {
	for _, v := range spec.Volumes {
		if n.volumes[v.ID] == nil {
			return api.Errorf(api.CodeNotFound, "volume %s is not on this node", v.ID)
		}
	}
	return nil
}
