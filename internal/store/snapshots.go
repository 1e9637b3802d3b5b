package store

import (
	"context"

	"github.com/cove-dev/cove/api"
)

// Snapshots is the part of Store that keeps snapshots and what stands on
// them (issue #32).
type Snapshots interface {
	// CreateSnapshot stores a new snapshot; another of the team with the
	// same name answers CodeConflict. The snapshots of its chain below
	// itself (Layers[1:]) count it as standing on them.
	CreateSnapshot(ctx context.Context, s Snapshot) error
	// GetSnapshot finds a snapshot of the team by ID or name.
	GetSnapshot(ctx context.Context, teamID, ref string) (Snapshot, error)
	// ListSnapshots lists a team's snapshots (every team's for "", the
	// meter's; of one sandbox when sandboxID is set), paged by ID.
	ListSnapshots(ctx context.Context, teamID, sandboxID, after string, limit int) ([]Snapshot, error)
	// DeleteSnapshot removes a snapshot and what it stood on.
	DeleteSnapshot(ctx context.Context, teamID, id string) error
	// SnapshotBytes is the stored size of all of a team's snapshots.
	SnapshotBytes(ctx context.Context, teamID string) (int64, error)
	// SetSandboxLayers records the snapshots a sandbox stands on, top
	// first (none: nil), replacing what it stood on.
	SetSandboxLayers(ctx context.Context, sandboxID string, layers []Layer) error
	// SandboxLayers returns them; a sandbox on none has none.
	SandboxLayers(ctx context.Context, sandboxID string) ([]Layer, error)
	// TemplateSnapshots lists, by ID, the snapshots (of any team) whose
	// files are changes to template: teamID's that name it so, and any
	// that name it as qualified (TEAM/NAME). An image they need is kept.
	TemplateSnapshots(ctx context.Context, teamID, template, qualified string) ([]Snapshot, error)
	// SnapshotUsers lists, sorted, the IDs of what stands on a snapshot:
	// sandboxes not terminated or failed, and other snapshots.
	SnapshotUsers(ctx context.Context, snapshotID string) ([]string, error)
}

// Snapshot is a snapshot and the layers a sandbox on it stands on.
type Snapshot struct {
	api.Snapshot
	// Template and Workdir are its sandbox's: a sandbox on it runs the
	// same template (its files are changes to that image's).
	Template string `json:"template"`
	Workdir  string `json:"workdir"`
	// Layers is the chain of snapshots a sandbox on this one stands on,
	// top first: this snapshot, then those its sandbox stood on.
	Layers []Layer `json:"layers"`
}

// Layer is a snapshot in a chain and the host ID range its files were
// written in.
type Layer struct {
	Snapshot string `json:"snapshot"`
	HostID   uint32 `json:"host_id"`
	Size     uint32 `json:"size"`
}
