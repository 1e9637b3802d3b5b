package store

import (
	"context"
	"time"

	"github.com/cove-dev/cove/api"
)

// Fleet persists the nodes of a fleet (`cove control`), where each
// sandbox is placed, and a few named values of the join service (its CA,
// the join token's hash). A `cove serve` keeps these tables empty.
type Fleet interface {
	// CreateNode stores a new node. CodeConflict for an ID in use, or a
	// name in use by a node that is not removed.
	CreateNode(ctx context.Context, n Node) error
	GetNode(ctx context.Context, id string) (Node, error)
	// UpdateNode replaces every field of the node with n's ID; a name
	// taken by another node that is not removed answers CodeConflict.
	UpdateNode(ctx context.Context, n Node) error
	// ListNodes lists every node, removed ones included, oldest first.
	ListNodes(ctx context.Context) ([]Node, error)

	// PutPlacement creates or replaces the placement of p's sandbox.
	PutPlacement(ctx context.Context, p Placement) error
	GetPlacement(ctx context.Context, sandboxID string) (Placement, error)
	// DeletePlacement forgets a sandbox's placement; a missing one is not
	// an error.
	DeletePlacement(ctx context.Context, sandboxID string) error
	// ListPlacements lists the placements on a node ("" for all), by
	// sandbox ID.
	ListPlacements(ctx context.Context, nodeID string) ([]Placement, error)

	// FleetValue returns the value stored under name (CodeNotFound when
	// there is none); PutFleetValue creates or replaces it;
	// CreateFleetValue creates it only where none is (CodeConflict else).
	FleetValue(ctx context.Context, name string) (string, error)
	PutFleetValue(ctx context.Context, name, value string) error
	CreateFleetValue(ctx context.Context, name, value string) error
}

// Node is a stored node of the fleet.
type Node struct {
	// node_…
	ID    string
	Name  string
	Addr  string
	State api.NodeState
	// Epoch is the node's current registration; each one increments it.
	Epoch    int64
	Capacity api.NodeCapacity
	// RegisteredAt is the last (re)registration; nil before the first.
	RegisteredAt *time.Time
	CreatedAt    time.Time
}

// Placement is where a sandbox runs and the save it would wake from.
type Placement struct {
	SandboxID string
	// NodeID is the node the sandbox is placed on in Epoch; "" while it
	// is placed nowhere (asleep).
	NodeID string
	Epoch  int64
	// Resources are what the sandbox reserves on its node.
	Resources api.Resources
	// SavedAt is when the sandbox's last save was recorded, nil when it
	// has none; SaveNodeID wrote it, SaveBytes long, as generation Save
	// ("" from a node whose store keeps one save per sandbox).
	Save       string
	SaveNodeID string
	SaveBytes  int64
	SavedAt    *time.Time
}
