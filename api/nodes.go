package api

import "time"

// Node states.
type NodeState string

const (
	// NodeReady nodes take new sandboxes.
	NodeReady NodeState = "ready"
	// NodeDraining nodes keep what they run and take nothing new.
	NodeDraining NodeState = "draining"
	// NodeLost nodes stopped sending heartbeats; their sandboxes went
	// asleep (from their save) or failed.
	NodeLost NodeState = "lost"
	// NodeRemoved nodes are revoked: their certificate is refused.
	NodeRemoved NodeState = "removed"
)

// NodeCapacity is what a node offers, before the control plane's
// overcommit factors.
type NodeCapacity struct {
	CPUs      float64 `json:"cpus"`
	MemoryMiB int64   `json:"memory_mib"`
	DiskMiB   int64   `json:"disk_mib"`
	// GPUs is how many GPUs of GPUType the node has.
	GPUs    int    `json:"gpus"`
	GPUType string `json:"gpu_type,omitempty"`
}

// Node is a machine of the fleet that runs sandboxes (admin team only).
type Node struct {
	// node_…
	ID   string `json:"id"`
	Name string `json:"name"`
	// ready, draining (takes nothing new), lost (silent) or removed
	// (revoked).
	State NodeState `json:"state" schema:"enum=ready,draining,lost,removed"`
	// The node API's address (host:port).
	Addr     string       `json:"addr"`
	Capacity NodeCapacity `json:"capacity"`
	// What the sandboxes placed on it reserve.
	Reserved Resources `json:"reserved"`
	// How many sandboxes are placed on it.
	Sandboxes int `json:"sandboxes"`
	// Its last (re)registration; null before the first.
	RegisteredAt *time.Time `json:"registered_at"`
	CreatedAt    time.Time  `json:"created_at"`
}

// SandboxNode names the node a sandbox is placed on; only the admin team
// sees it.
type SandboxNode struct {
	ID   string `json:"id"`
	Name string `json:"name"`
}

// JoinToken is a new join token for `cove node` to join with; the previous one
// stops working. It is shown once.
type JoinToken struct {
	Token     string    `json:"token"`
	ExpiresAt time.Time `json:"expires_at"`
}
