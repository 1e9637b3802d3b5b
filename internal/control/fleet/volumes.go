package fleet

import (
	"context"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/node"
)

// errNoVolumes answers every volume call until volumes are built here.
var errNoVolumes = api.Errorf(api.CodeUnprocessable, "volumes are not supported by this node yet")

// CreateVolume makes a volume's disk.
func (f *Fleet) CreateVolume(ctx context.Context, id string, sizeMiB int64) (node.VolumeRef, error) {
	return node.VolumeRef{}, errNoVolumes
}

// DropVolume removes a volume's disk.
func (f *Fleet) DropVolume(ctx context.Context, v node.VolumeRef) error { return errNoVolumes }

// VolumeUsage measures a volume's disk.
func (f *Fleet) VolumeUsage(ctx context.Context, v node.VolumeRef) (node.VolumeInfo, error) {
	return node.VolumeInfo{}, errNoVolumes
}
