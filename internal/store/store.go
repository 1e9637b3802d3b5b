// Package store defines cove's persistence contract. Implementations live in
// sub-packages (sqlite/, postgres/) and all pass storetest's suite.
package store

import (
	"context"
	"time"

	"github.com/cove-dev/cove/api"
)

// Store is everything the control plane persists. Methods return *api.Error
// with CodeNotFound for missing rows and CodeConflict for uniqueness
// violations; anything else is internal. Creating a row whose team or
// sandbox does not exist answers CodeNotFound. Updates replace every field of
// the row with the same ID and owner (team or sandbox). Times come back in UTC,
// exact to the microsecond at least; maps and slices come back non-nil.
//
// Sandboxes, commands, workloads and previews carry a row version (their
// Version field), so that writers that do not share a lock (replicas of
// the control plane) never lose each other's changes: a create stores
// version 1 whatever the given one, reads return the stored version, and
// UpdateSandbox, UpdateCommand and UpdateWorkload succeed only while the
// row is still at the given Version, then store Version+1 (the caller
// increments its own copy to go on writing it). A row at another version
// answers CodeConflict ("… changed since it was read; retry"): the caller
// reads it again, decides again and writes again. Writes of single columns
// that no update replaces (cost_usd, stored bytes) leave the version alone.
type Store interface {
	Secrets
	Assets
	Snapshots
	Volumes
	Previews
	Admissions
	Images
	Workloads
	WorkloadUsage
	Fleet
	Replicas

	// Teams and keys.
	CreateTeam(ctx context.Context, t api.Team) error
	GetTeam(ctx context.Context, id string) (api.Team, error)
	GetTeamByName(ctx context.Context, name string) (api.Team, error)
	ListTeams(ctx context.Context) ([]api.Team, error)
	CreateKey(ctx context.Context, k Key) error
	// KeyByHash returns the unrevoked key with that hash and its team,
	// in one read.
	KeyByHash(ctx context.Context, hash string) (Key, api.Team, error)
	// GetKey returns a key by ID, revoked or not.
	GetKey(ctx context.Context, id string) (Key, error)
	RevokeKey(ctx context.Context, id string) error

	// Sandboxes. Names are unique per team among sandboxes whose state is
	// not terminal (terminated, failed): CreateSandbox and a rename answer
	// CodeConflict otherwise.
	CreateSandbox(ctx context.Context, s api.Sandbox) error
	// CreateSandboxEvent is CreateSandbox and AppendEvent of e to the
	// sandbox's team (with its webhook deliveries) in one transaction:
	// both are stored or neither; the event comes back as AppendEvent
	// returns it.
	CreateSandboxEvent(ctx context.Context, s api.Sandbox, e api.Event) (api.Event, error)
	// GetSandbox finds a sandbox of the team; teamID "" finds it in any team
	// (for the server's own bookkeeping, never for a request).
	GetSandbox(ctx context.Context, teamID, id string) (api.Sandbox, error)
	// GetSandboxByName finds the newest non-terminal sandbox of that name, or
	// else the newest terminal one.
	GetSandboxByName(ctx context.Context, teamID, name string) (api.Sandbox, error)
	UpdateSandbox(ctx context.Context, s api.Sandbox) error
	// UpdateSandboxEvent is UpdateSandbox and AppendEvent of e to the
	// sandbox's team in one transaction, as UpdateCommandEvent is for a
	// command: a stale or missing sandbox answers as UpdateSandbox does
	// and appends nothing.
	UpdateSandboxEvent(ctx context.Context, s api.Sandbox, e api.Event) (api.Event, error)
	ListSandboxes(ctx context.Context, f SandboxFilter) ([]api.Sandbox, error)

	// Commands.
	CreateCommand(ctx context.Context, c api.Command) error
	GetCommand(ctx context.Context, sandboxID, id string) (api.Command, error)
	UpdateCommand(ctx context.Context, c api.Command) error
	// UpdateCommandEvent is UpdateCommand and AppendEvent of e to the
	// team's log (with its webhook deliveries) in one transaction: both
	// are stored or neither. A stale or missing command answers as
	// UpdateCommand does and appends nothing; the event comes back as
	// AppendEvent returns it.
	UpdateCommandEvent(ctx context.Context, c api.Command, teamID string, e api.Event) (api.Event, error)
	// DeleteCommand removes a command that never started.
	DeleteCommand(ctx context.Context, sandboxID, id string) error
	ListCommands(ctx context.Context, f CommandFilter) ([]api.Command, error)

	// Events. AppendEvent assigns the event's ID, which sorts after every
	// earlier event's.
	AppendEvent(ctx context.Context, teamID string, e api.Event) (api.Event, error)
	ListEvents(ctx context.Context, f EventFilter) ([]api.Event, error)
	// DeleteEventsBefore drops every team's events older than t and
	// reports how many it dropped. IDs are never reused: cursors after a
	// dropped event still work.
	DeleteEventsBefore(ctx context.Context, t time.Time) (int64, error)

	// Idempotency keys: a request claims its team's key before it runs
	// (a pending record owned by the replica running it) and completes the
	// claim with its answer, or releases it when it failed.
	//
	// ClaimIdempotent inserts c as a pending record and returns it with
	// true, or returns the record already under the key (pending or
	// answered) with false; CodeNotFound when the team does not exist.
	// CompleteIdempotent stores the answer of owner's pending claim, and
	// ReleaseIdempotent drops owner's pending claim; both answer
	// CodeConflict when the key holds no pending claim of owner.
	// TakeOverIdempotent hands deadOwner's pending claim to newOwner and
	// returns it, CodeConflict when the claim is no longer pending under
	// deadOwner (another replica took it over, or it was answered).
	// DeleteIdempotentBefore drops records claimed before t.
	ClaimIdempotent(ctx context.Context, c IdempotencyClaim) (Idempotent, bool, error)
	CompleteIdempotent(ctx context.Context, teamID, key, owner string, status int, body []byte) error
	ReleaseIdempotent(ctx context.Context, teamID, key, owner string) error
	TakeOverIdempotent(ctx context.Context, teamID, key, deadOwner, newOwner string) (Idempotent, error)
	DeleteIdempotentBefore(ctx context.Context, t time.Time) error

	Usage
	Observations

	// Host ID ranges of sandboxes (idranges.go).
	IDRanges
	Webhooks

	Close() error
}

// IdempotencyClaim is a request's claim on its team's Idempotency-Key,
// made before the request runs.
type IdempotencyClaim struct {
	TeamID string
	Key    string
	// RequestHash identifies the request (method, path, body): the key
	// may not be reused for another request.
	RequestHash string
	// Owner is the replica that runs the request.
	Owner string
	// Seed is random, made with the claim: the IDs the request creates
	// are derived from it, so a replica that takes the claim over makes
	// the same IDs and finds what the first attempt created.
	Seed      []byte
	ClaimedAt time.Time
}

// Idempotent is the record under a team's Idempotency-Key: pending
// (Status 0) while its request runs on Owner, then the answer the same
// key replays. It never holds a secret in clear: answers that show one
// are kept without it.
type Idempotent struct {
	TeamID      string
	Key         string
	RequestHash string
	Owner       string
	Seed        []byte
	Status      int
	Body        []byte
	CreatedAt   time.Time
}

// Pending reports whether the record's request has not answered yet.
func (a Idempotent) Pending() bool { return a.Status == 0 }

// EventFilter selects a team's events, oldest first, after the event whose
// ID is After.
type EventFilter struct {
	TeamID    string
	SandboxID string
	Types     []string
	After     string
	Limit     int
}

// Key is a stored API key: only its hash is kept.
type Key struct {
	ID        string
	TeamID    string
	Hash      string
	CreatedAt time.Time
	RevokedAt *time.Time
}

// SandboxFilter selects sandboxes. Empty fields match everything; TeamID ""
// means every team (used by the server's reconciler only). Results are
// ordered by creation, oldest first, and paged by ID: After is the last ID
// already seen, Limit 0 means no limit.
type SandboxFilter struct {
	TeamID string
	States []api.SandboxState
	Labels map[string]string
	// IdempotencyRef selects the sandbox an idempotent create stored
	// under that derived ID (api.Sandbox.IdempotencyRef).
	IdempotencyRef string
	After          string
	Limit          int
}

// CommandFilter selects commands of one sandbox ("" for all sandboxes) in
// creation order, paged like SandboxFilter.
type CommandFilter struct {
	SandboxID string
	States    []api.CommandState
	After     string
	Limit     int
}
