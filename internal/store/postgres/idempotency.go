package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/store"
)

// GetIdempotent returns the answer stored under a team's key.
func (db *DB) GetIdempotent(ctx context.Context, teamID, key string) (store.Idempotent, error) {
	a := store.Idempotent{TeamID: teamID, Key: key}
	err := db.pool.QueryRow(ctx,
		"SELECT request_hash, status, body, created_at FROM idempotency WHERE team_id = $1 AND key = $2", teamID, key).
		Scan(&a.RequestHash, &a.Status, &a.Body, &a.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return a, api.Errorf(api.CodeNotFound, "no answer under idempotency key %q", key)
	}
	if err != nil {
		return a, fmt.Errorf("get idempotent answer: %w", err)
	}
	return a, nil
}

// PutIdempotent stores an answer; a key already used is a conflict.
func (db *DB) PutIdempotent(ctx context.Context, a store.Idempotent) error {
	if a.Body == nil {
		a.Body = []byte{}
	}
	_, err := db.pool.Exec(ctx,
		"INSERT INTO idempotency (team_id, key, request_hash, status, body, created_at) VALUES ($1, $2, $3, $4, $5, $6)",
		a.TeamID, a.Key, a.RequestHash, a.Status, a.Body, a.CreatedAt)
	switch violation(err) {
	case "primary", "unique":
		return api.Errorf(api.CodeConflict, "idempotency key %q is already used", a.Key)
	case "foreign":
		return api.Errorf(api.CodeNotFound, "team %s not found", a.TeamID)
	}
	if err != nil {
		return fmt.Errorf("put idempotent answer: %w", err)
	}
	return nil
}

// DeleteIdempotentBefore drops answers stored before t.
func (db *DB) DeleteIdempotentBefore(ctx context.Context, t time.Time) error {
	if _, err := db.pool.Exec(ctx, "DELETE FROM idempotency WHERE created_at < $1", t); err != nil {
		return fmt.Errorf("expire idempotent answers: %w", err)
	}
	return nil
}
