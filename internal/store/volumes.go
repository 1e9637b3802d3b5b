package store

import (
	"context"

	"github.com/cove-dev/cove/api"
)

// Volumes is the part of Store that keeps teams' volumes (issue #32).
// What mounts a volume is kept with each sandbox (api.Sandbox.Volumes,
// set at create).
type Volumes interface {
	// CreateVolume stores a new volume; another of the team with the
	// same name answers CodeConflict, an unknown team CodeNotFound.
	CreateVolume(ctx context.Context, v api.Volume) error
	// GetVolume finds a volume of the team by ID or name; Sandboxes is
	// left empty (VolumeUsers fills it).
	GetVolume(ctx context.Context, teamID, ref string) (api.Volume, error)
	// ListVolumes lists a team's volumes (every team's for "", the
	// meter's and the usage poll's), paged by ID.
	ListVolumes(ctx context.Context, teamID, after string, limit int) ([]api.Volume, error)
	// DeleteVolume removes a volume of the team.
	DeleteVolume(ctx context.Context, teamID, id string) error
	// SetVolumeUsed records a volume's last measured use. It leaves the
	// row's other columns alone; an unknown volume is not an error.
	SetVolumeUsed(ctx context.Context, id string, usedBytes int64) error
	// VolumeTotals counts a team's volumes and sums their sizes.
	VolumeTotals(ctx context.Context, teamID string) (count int, sizeMiB int64, err error)
	// VolumeUsers lists, sorted, the IDs of the team's sandboxes, not
	// terminated or failed, that mount a volume.
	VolumeUsers(ctx context.Context, teamID, volumeID string) ([]string, error)
}
