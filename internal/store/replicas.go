package store

import (
	"context"
	"time"
)

// Replicas is what the replicas of a control plane share to agree on one
// leader and to know which of them are alive. Times are the store's own
// clock (the database's in PostgreSQL), so replicas on hosts whose clocks
// differ still agree on a lease's expiry.
type Replicas interface {
	// AcquireLease takes the lease name for holder, or renews it, when it
	// is free, expired or already holder's: one conditional write that
	// sets its expiry to now+ttl. It returns the lease as it stands after
	// the write, whoever holds it: the caller holds it only when the
	// returned Holder is holder. Term increments at each change of holder.
	AcquireLease(ctx context.Context, name, holder string, ttl time.Duration) (Lease, error)
	// ReleaseLease ends holder's lease at once, so that another replica
	// takes it at its next try; a lease holder does not hold is left as it
	// is.
	ReleaseLease(ctx context.Context, name, holder string) error

	// BeatReplica records that r is alive now (its SeenAt is the store's
	// clock), creating its row at the first beat.
	BeatReplica(ctx context.Context, r Replica) error
	// ListReplicas lists every replica that ever beat, by ID.
	ListReplicas(ctx context.Context) ([]Replica, error)

	// PruneReplicas deletes the replicas whose last beat is before
	// seenBefore (a time on the store's clock, as SeenAt is): one
	// conditional delete, so a replica that beat since keeps its row.
	PruneReplicas(ctx context.Context, seenBefore time.Time) (int64, error)

	// ClaimSandbox records replicaID as the replica driving the
	// sandbox's current transition (creating, setting up, sleeping,
	// waking, terminating), replacing any earlier claim: when that replica
	// dies, the leader finishes the transition.
	ClaimSandbox(ctx context.Context, sandboxID, replicaID string) error
	// SandboxOwner returns the replica that claimed the sandbox last, ""
	// when none did.
	SandboxOwner(ctx context.Context, sandboxID string) (string, error)
	// PruneSandboxOwners deletes the claims of terminated and failed
	// sandboxes (no transition follows either), or of sandboxes that no
	// longer exist, in one conditional delete.
	PruneSandboxOwners(ctx context.Context) (int64, error)
}

// Lease is a named lease (the leader's is "leader").
type Lease struct {
	Name   string
	Holder string
	// Term counts the changes of holder: a new leader has a higher term
	// than every earlier one.
	Term      int64
	ExpiresAt time.Time
}

// Replica is a control plane process sharing the store.
type Replica struct {
	// ID is the replica's own (rep_…), new at every start.
	ID string
	// Addr is where its API listens, for operators.
	Addr      string
	StartedAt time.Time
	// SeenAt is its last beat, on the store's clock.
	SeenAt time.Time
}
