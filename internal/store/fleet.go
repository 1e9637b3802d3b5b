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

	// BeatNode records a heartbeat of a node: HeartbeatAt, capacity, GPU
	// names and templates, in one write, only while the node is ready or
	// draining in b.Epoch (CodeConflict otherwise: the node registers
	// again; CodeNotFound for a node never stored). Every control
	// replica sees the node alive through it. The same write empties the
	// node's JoinHash: a node heard with its certificate got its join's
	// answer, and its join nonce admits nothing any more.
	BeatNode(ctx context.Context, b NodeBeat) error
	// AdmitPlacement stores p only if its node is ready in p.Epoch
	// (CodeConflict otherwise) and the resources of every other
	// placement on that node plus p's stay within limit in CPUs and
	// memory (CodeResourceExhausted otherwise), as one atomic step: two
	// control replicas placing at once never put a node over limit.
	AdmitPlacement(ctx context.Context, p Placement, limit api.Resources) error

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
	// GPUNames are the node's GPU devices (Capacity counts them).
	GPUNames []string
	// Templates are the templates the node can start now.
	Templates []string
	// RegisteredAt is the last (re)registration; nil before the first.
	RegisteredAt *time.Time
	// HeartbeatAt is the node's last heartbeat (or registration) on any
	// control replica; nil before the first.
	HeartbeatAt *time.Time
	CreatedAt   time.Time
	// JoinHash is the hash of the join nonce the node joined with (hex
	// sha256, pki.HashJoinNonce) until it is first heard with its
	// certificate (a heartbeat, a registration again); "" for a node that
	// joined without one, or spent it. A join by name that brings the same
	// nonce again is the same node retrying a join whose answer it never
	// got.
	JoinHash string
}

// NodeBeat is one heartbeat of a node, as BeatNode records it.
type NodeBeat struct {
	ID        string
	Epoch     int64
	At        time.Time
	Capacity  api.NodeCapacity
	GPUNames  []string
	Templates []string
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

// CheckRoom is AdmitPlacement's rule, one for every store: the node's
// other placements (cpus and memMiB reserved) plus p stay within limit.
// A small tolerance absorbs the rounding of CPU shares summed in floating
// point.
func CheckRoom(p Placement, cpus float64, memMiB int64, limit api.Resources) error {
	if cpus+p.Resources.CPUs > limit.CPUs+1e-9 || memMiB+p.Resources.MemoryMiB > limit.MemoryMiB {
		return api.Errorf(api.CodeResourceExhausted,
			"node %s has %g CPUs and %d MiB reserved of %g and %d: no room for %g CPUs and %d MiB",
			p.NodeID, cpus, memMiB, limit.CPUs, limit.MemoryMiB, p.Resources.CPUs, p.Resources.MemoryMiB)
	}
	return nil
}
