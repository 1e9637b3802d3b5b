package store

import (
	"context"
	"time"

	"github.com/cove-dev/cove/api"
)

// Observations keeps what sandboxes did on the network: one row per
// sandbox, destination, port, decision and reason, which the node's reports add to.
// Rows outlive the sandbox's runtime and expire by age.
type Observations interface {
	// AddObservations adds each report to its row in one transaction:
	// counts and bytes are summed, first_seen is the earliest, last_seen
	// the latest, and a non-empty LastCommandID replaces the row's. A
	// report for a destination the sandbox has no row for yet, while the
	// sandbox already has maxPerSandbox rows or more, is added to the row
	// of destination "other", port 0 (so a sandbox has at most
	// maxPerSandbox+2 rows). A report of a sandbox the store does not hold
	// answers CodeNotFound, and nothing is written.
	AddObservations(ctx context.Context, reports []Observation, maxPerSandbox int) error
	// ListObservations returns a sandbox's rows sorted by destination,
	// port, decision and reason.
	ListObservations(ctx context.Context, sandboxID string) ([]api.NetworkObservation, error)
	// DeleteObservationsBefore drops every row last seen before t and
	// reports how many it dropped.
	DeleteObservationsBefore(ctx context.Context, t time.Time) (int64, error)
}

// Observation is one report to add to a sandbox's observations.
type Observation struct {
	SandboxID string
	api.NetworkObservation
}
