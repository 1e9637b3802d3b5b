package store

import (
	"context"

	"github.com/cove-dev/cove/api"
)

// Workloads persists batch runs, their queue included: a queued workload
// is a row in state queued, so the queue outlives a restart of the server.
type Workloads interface {
	// CreateWorkload stores a new workload of an existing team
	// (CodeNotFound otherwise; CodeConflict for an ID in use).
	CreateWorkload(ctx context.Context, w api.Workload) error
	// GetWorkload finds a workload of the team; teamID "" finds it in any
	// team (the server's own bookkeeping).
	GetWorkload(ctx context.Context, teamID, id string) (api.Workload, error)
	// UpdateWorkload replaces every field of the workload with w's ID and
	// team.
	UpdateWorkload(ctx context.Context, w api.Workload) error
	ListWorkloads(ctx context.Context, f WorkloadFilter) ([]api.Workload, error)
}

// WorkloadFilter selects workloads, oldest first (the queue's order),
// paged by ID like SandboxFilter; TeamID "" means every team.
type WorkloadFilter struct {
	TeamID string
	States []api.WorkloadState
	After  string
	Limit  int
}
