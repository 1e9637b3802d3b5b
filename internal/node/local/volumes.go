package local

import (
	"context"

	"github.com/cove-dev/cove/internal/node"
)

// CreateVolume makes a volume's disk on this node; the VolumeRef's Node
// is "" (this node), which a fleet fills in.
func (n *Node) CreateVolume(ctx context.Context, id string, sizeMiB int64) (node.VolumeRef, error) {
	// Admitted as a sandbox's disk is: the data disk must hold it full
	// (one made already is counted among the promised disks).
	if !n.rt.HasVolume(id) {
		release, err := n.reserve(volumePrefix+id, sizeMiB<<20)
		if err != nil {
			return node.VolumeRef{}, err
		}
		defer release()
	}
	if err := n.rt.CreateVolume(ctx, id, sizeMiB); err != nil {
		return node.VolumeRef{}, err
	}
	return node.VolumeRef{ID: id}, nil
}

// DropVolume removes a volume's disk; one a sandbox of the node mounts
// is refused with precondition_failed.
func (n *Node) DropVolume(ctx context.Context, v node.VolumeRef) error {
	return n.rt.DropVolume(ctx, v.ID)
}

// VolumeUsage measures a volume's disk.
func (n *Node) VolumeUsage(ctx context.Context, v node.VolumeRef) (node.VolumeInfo, error) {
	u, err := n.rt.VolumeUsage(ctx, v.ID)
	if err != nil {
		return node.VolumeInfo{}, err
	}
	return node.VolumeInfo{SizeBytes: u.SizeBytes, UsedBytes: u.UsedBytes, Full: u.Full}, nil
}

// volumePrefix keeps volumes apart from sandbox IDs in pending.
const volumePrefix = "volume:"
