package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

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
	// The insert and the read of a record already there are one write
	// transaction, so an expiry between them cannot leave neither. Both
	// run kept statements (every keyed request claims).
	db.write.prepare(ctx, claimIdempotentSQL, selectIdempotentSQL)
	t, err := db.write.BeginTx(ctx, nil)
	if err != nil {
		return store.Idempotent{}, false, fmt.Errorf("claim idempotency key: %w", err)
	}
	defer t.Rollback()
	tx := db.write.kept(t)
	res, err := tx.ExecContext(ctx, claimIdempotentSQL,
		c.TeamID, c.Key, c.RequestHash, c.Owner, c.Seed, formatTime(c.ClaimedAt))
	if sqliteCode(err) == foreignKeyViolation {
		return store.Idempotent{}, false, api.Errorf(api.CodeNotFound, "team %s not found", c.TeamID)
	}
	if err != nil {
		return store.Idempotent{}, false, fmt.Errorf("claim idempotency key: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 1 {
		if err := tx.Commit(); err != nil {
			return store.Idempotent{}, false, fmt.Errorf("claim idempotency key: %w", err)
		}
		return store.Idempotent{TeamID: c.TeamID, Key: c.Key, RequestHash: c.RequestHash, Owner: c.Owner,
			Seed: c.Seed, Body: []byte{}, CreatedAt: c.ClaimedAt.UTC()}, true, nil
	}
	a, err := scanIdempotent(tx.QueryRowContext(ctx, selectIdempotentSQL, c.TeamID, c.Key))
	if err != nil {
		return a, false, err
	}
	return a, false, tx.Commit()
}

const (
	claimIdempotentSQL  = "INSERT INTO idempotency (" + idempotentColumns + ") VALUES (?, ?, ?, ?, ?, 0, x'', ?) ON CONFLICT (team_id, key) DO NOTHING"
	selectIdempotentSQL = "SELECT " + idempotentColumns + " FROM idempotency WHERE team_id = ? AND key = ?"
)

func scanIdempotent(row *sql.Row) (store.Idempotent, error) {
	var (
		a       store.Idempotent
		created string
	)
	err := row.Scan(&a.TeamID, &a.Key, &a.RequestHash, &a.Owner, &a.Seed, &a.Status, &a.Body, &created)
	if errors.Is(err, sql.ErrNoRows) {
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
	var d decoder
	a.CreatedAt = d.time(created)
	return a, d.err
}

// CompleteIdempotent stores the answer of owner's pending claim.
func (db *DB) CompleteIdempotent(ctx context.Context, teamID, key, owner string, status int, body []byte) error {
	if status == 0 {
		return fmt.Errorf("complete idempotency key %q: status 0 marks a pending claim", key)
	}
	if body == nil {
		body = []byte{}
	}
	res, err := db.write.ExecContext(ctx,
		"UPDATE idempotency SET status = ?, body = ? WHERE team_id = ? AND key = ? AND owner = ? AND status = 0",
		status, body, teamID, key, owner)
	return claimChanged(res, err, "complete", key)
}

// ReleaseIdempotent drops owner's pending claim.
func (db *DB) ReleaseIdempotent(ctx context.Context, teamID, key, owner string) error {
	res, err := db.write.ExecContext(ctx,
		"DELETE FROM idempotency WHERE team_id = ? AND key = ? AND owner = ? AND status = 0", teamID, key, owner)
	return claimChanged(res, err, "release", key)
}

// TakeOverIdempotent hands deadOwner's pending claim to newOwner.
func (db *DB) TakeOverIdempotent(ctx context.Context, teamID, key, deadOwner, newOwner string) (store.Idempotent, error) {
	tx, err := db.write.BeginTx(ctx, nil)
	if err != nil {
		return store.Idempotent{}, fmt.Errorf("take over idempotency key: %w", err)
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx,
		"UPDATE idempotency SET owner = ? WHERE team_id = ? AND key = ? AND owner = ? AND status = 0",
		newOwner, teamID, key, deadOwner)
	if err := claimChanged(res, err, "take over", key); err != nil {
		return store.Idempotent{}, err
	}
	a, err := scanIdempotent(tx.QueryRowContext(ctx,
		"SELECT "+idempotentColumns+" FROM idempotency WHERE team_id = ? AND key = ?", teamID, key))
	if err != nil {
		return a, err
	}
	return a, tx.Commit()
}

// claimChanged turns a conditional write on a pending claim into its
// error: CodeConflict when no row matched.
func claimChanged(res sql.Result, err error, verb, key string) error {
	if err != nil {
		return fmt.Errorf("%s idempotency key %q: %w", verb, key, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("%s idempotency key %q: %w", verb, key, err)
	} else if n == 0 {
		return api.Errorf(api.CodeConflict, "idempotency key %q holds no pending claim of this replica", key)
	}
	return nil
}

// DeleteIdempotentBefore drops records claimed before t.
func (db *DB) DeleteIdempotentBefore(ctx context.Context, t time.Time) error {
	if _, err := db.write.ExecContext(ctx, "DELETE FROM idempotency WHERE created_at < ?", formatTime(t)); err != nil {
		return fmt.Errorf("expire idempotency records: %w", err)
	}
	return nil
}
