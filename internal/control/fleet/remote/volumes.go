package remote

import (
	"context"

	"github.com/cove-dev/cove/internal/node"
)

// CreateVolume makes a volume's disk on the node. The node answers its
// own VolumeRef (Node ""); the fleet names the node.
func (c *Client) CreateVolume(ctx context.Context, id string, sizeMiB int64) (node.VolumeRef, error) {
	var out node.VolumeRef
	err := c.call(ctx, "create-volume", true, args{Volume: &node.VolumeRef{ID: id}, SizeMiB: sizeMiB}, &out)
	return out, err
}

// DropVolume removes a volume's disk from the node.
func (c *Client) DropVolume(ctx context.Context, v node.VolumeRef) error {
	return c.call(ctx, "drop-volume", true, args{Volume: &v}, nil)
}

// VolumeUsage measures a volume's disk on the node.
func (c *Client) VolumeUsage(ctx context.Context, v node.VolumeRef) (node.VolumeInfo, error) {
	var out node.VolumeInfo
	err := c.call(ctx, "volume-usage", false, args{Volume: &v}, &out)
	return out, err
}
