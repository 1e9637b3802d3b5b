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

// GetIdempotent returns the answer stored under a team's key.
func (db *DB) GetIdempotent(ctx context.Context, teamID, key string) (store.Idempotent, error) {
	a := store.Idempotent{TeamID: teamID, Key: key}
	var created string
	err := db.read.QueryRowContext(ctx,
		"SELECT request_hash, status, body, created_at FROM idempotency WHERE team_id = ? AND key = ?", teamID, key).
		Scan(&a.RequestHash, &a.Status, &a.Body, &created)
	if errors.Is(err, sql.ErrNoRows) {
		return a, api.Errorf(api.CodeNotFound, "no answer under idempotency key %q", key)
	}
	if err != nil {
		return a, fmt.Errorf("get idempotent answer: %w", err)
	}
	var d decoder
	a.CreatedAt = d.time(created)
	return a, d.err
}

// PutIdempotent stores an answer; a key already used is a conflict.
func (db *DB) PutIdempotent(ctx context.Context, a store.Idempotent) error {
	if a.Body == nil {
		a.Body = []byte{}
	}
	_, err := db.write.ExecContext(ctx,
		"INSERT INTO idempotency (team_id, key, request_hash, status, body, created_at) VALUES (?, ?, ?, ?, ?, ?)",
		a.TeamID, a.Key, a.RequestHash, a.Status, a.Body, formatTime(a.CreatedAt))
	switch sqliteCode(err) {
	case primaryKeyViolation, uniqueViolation:
		return api.Errorf(api.CodeConflict, "idempotency key %q is already used", a.Key)
	case foreignKeyViolation:
		return api.Errorf(api.CodeNotFound, "team %s not found", a.TeamID)
	}
	if err != nil {
		return fmt.Errorf("put idempotent answer: %w", err)
	}
	return nil
}

// DeleteIdempotentBefore drops answers stored before t.
func (db *DB) DeleteIdempotentBefore(ctx context.Context, t time.Time) error {
	if _, err := db.write.ExecContext(ctx, "DELETE FROM idempotency WHERE created_at < ?", formatTime(t)); err != nil {
		return fmt.Errorf("expire idempotent answers: %w", err)
	}
	return nil
}
