package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/store"
)

const idempotentColumns = "team_id, key, request_hash, owner, seed, status, body, created_at"

// ClaimIdempotent inserts a pending record for c, or returns the record
// already under the key.
func (db *DB) ClaimIdempotent(ctx context.Context, c store.IdempotencyClaim) (store.Idempotent, bool, error) {
	if c.Seed == nil {
		c.Seed = []byte{}
	}
	// The insert waits for a concurrent claim of the key to commit, then
	// does nothing; the read that follows sees that claim unless it was
	// released or expired meanwhile, when the key is free to claim again.
	for range 5 {
		tag, err := db.pool.Exec(ctx,
			"INSERT INTO idempotency ("+idempotentColumns+") VALUES ($1, $2, $3, $4, $5, 0, '\\x', $6) ON CONFLICT (team_id, key) DO NOTHING",
			c.TeamID, c.Key, c.RequestHash, c.Owner, c.Seed, c.ClaimedAt)
		if violation(err) == "foreign" {
			return store.Idempotent{}, false, api.Errorf(api.CodeNotFound, "team %s not found", c.TeamID)
		}
		if err != nil {
			return store.Idempotent{}, false, fmt.Errorf("claim idempotency key: %w", err)
		}
		if tag.RowsAffected() == 1 {
			return store.Idempotent{TeamID: c.TeamID, Key: c.Key, RequestHash: c.RequestHash, Owner: c.Owner,
				Seed: c.Seed, Body: []byte{}, CreatedAt: utc(c.ClaimedAt)}, true, nil
		}
		a, err := scanIdempotent(db.pool.QueryRow(ctx,
			"SELECT "+idempotentColumns+" FROM idempotency WHERE team_id = $1 AND key = $2", c.TeamID, c.Key))
		if api.ErrorCode(err) == api.CodeNotFound {
			continue
		}
		return a, false, err
	}
	return store.Idempotent{}, false, api.Errorf(api.CodeConflict, "idempotency key %q changed hands repeatedly; retry", c.Key)
}

func scanIdempotent(row pgx.Row) (store.Idempotent, error) {
	var a store.Idempotent
	err := row.Scan(&a.TeamID, &a.Key, &a.RequestHash, &a.Owner, &a.Seed, &a.Status, &a.Body, &a.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return a, api.Errorf(api.CodeNotFound, "no record under the idempotency key")
	}
	if err != nil {
		return a, fmt.Errorf("read idempotency record: %w", err)
	}
	if a.Seed == nil {
		a.Seed = []byte{}
	}
	if a.Body == nil {
		a.Body = []byte{}
	}
	return a, nil
}

// CompleteIdempotent stores the answer of owner's pending claim.
func (db *DB) CompleteIdempotent(ctx context.Context, teamID, key, owner string, status int, body []byte) error {
	if status == 0 {
		return fmt.Errorf("complete idempotency key %q: status 0 marks a pending claim", key)
	}
	if body == nil {
		body = []byte{}
	}
	tag, err := db.pool.Exec(ctx,
		"UPDATE idempotency SET status = $1, body = $2 WHERE team_id = $3 AND key = $4 AND owner = $5 AND status = 0",
		status, body, teamID, key, owner)
	return claimChanged(tag, err, "complete", key)
}

// ReleaseIdempotent drops owner's pending claim.
func (db *DB) ReleaseIdempotent(ctx context.Context, teamID, key, owner string) error {
	tag, err := db.pool.Exec(ctx,
		"DELETE FROM idempotency WHERE team_id = $1 AND key = $2 AND owner = $3 AND status = 0", teamID, key, owner)
	return claimChanged(tag, err, "release", key)
}

// TakeOverIdempotent hands deadOwner's pending claim to newOwner.
func (db *DB) TakeOverIdempotent(ctx context.Context, teamID, key, deadOwner, newOwner string) (store.Idempotent, error) {
	a, err := scanIdempotent(db.pool.QueryRow(ctx,
		"UPDATE idempotency SET owner = $1 WHERE team_id = $2 AND key = $3 AND owner = $4 AND status = 0 RETURNING "+idempotentColumns,
		newOwner, teamID, key, deadOwner))
	if api.ErrorCode(err) == api.CodeNotFound {
		return a, api.Errorf(api.CodeConflict, "idempotency key %q holds no pending claim of replica %s", key, deadOwner)
	}
	return a, err
}

// claimChanged turns a conditional write on a pending claim into its
// error: CodeConflict when no row matched.
func claimChanged(tag pgconn.CommandTag, err error, verb, key string) error {
	if err != nil {
		return fmt.Errorf("%s idempotency key %q: %w", verb, key, err)
	}
	if tag.RowsAffected() == 0 {
		return api.Errorf(api.CodeConflict, "idempotency key %q holds no pending claim of this replica", key)
	}
	return nil
}

// DeleteIdempotentBefore drops records claimed before t.
func (db *DB) DeleteIdempotentBefore(ctx context.Context, t time.Time) error {
	if _, err := db.pool.Exec(ctx, "DELETE FROM idempotency WHERE created_at < $1", t); err != nil {
		return fmt.Errorf("expire idempotency records: %w", err)
	}
	return nil
}
