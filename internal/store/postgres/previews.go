package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/store"
)

const previewColumns = "id, team_id, sandbox_id, port, visibility, wake, token_hash, created_at"

func scanPreview(r scanner) (store.Preview, error) {
	var p store.Preview
	err := r.Scan(&p.ID, &p.TeamID, &p.SandboxID, &p.Port, &p.Visibility, &p.Wake, &p.TokenHash, &p.CreatedAt, &p.Version)
	return p, err
}

// CreatePreview stores a preview of an existing sandbox.
func (db *DB) CreatePreview(ctx context.Context, p store.Preview) error {
	_, err := db.pool.Exec(ctx, "INSERT INTO previews ("+previewColumns+") VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
		p.ID, p.TeamID, p.SandboxID, p.Port, p.Visibility, p.Wake, p.TokenHash, p.CreatedAt)
	switch violation(err) {
	case "unique":
		return api.Errorf(api.CodeConflict, "sandbox %s already has a preview of port %d", p.SandboxID, p.Port)
	case "primary":
		return api.Errorf(api.CodeConflict, "preview %s already exists", p.ID)
	case "foreign":
		return api.Errorf(api.CodeNotFound, "sandbox %s not found", p.SandboxID)
	}
	if err != nil {
		return fmt.Errorf("insert preview %s: %w", p.ID, err)
	}
	return nil
}

// GetPreview finds a preview of the team (any team's for "").
func (db *DB) GetPreview(ctx context.Context, teamID, id string) (store.Preview, error) {
	var w where
	w.add("id = ?", id)
	if teamID != "" {
		w.add("team_id = ?", teamID)
	}
	return db.getPreview(ctx, fmt.Sprintf("preview %s not found", id), "SELECT "+previewColumns+", version FROM previews"+w.clause(), w.args...)
}

// PreviewByPort finds the preview of a sandbox's port.
func (db *DB) PreviewByPort(ctx context.Context, sandboxID string, port int) (store.Preview, error) {
	return db.getPreview(ctx, fmt.Sprintf("sandbox %s publishes no port %d", sandboxID, port),
		"SELECT "+previewColumns+", version FROM previews WHERE sandbox_id = $1 AND port = $2", sandboxID, port)
}

func (db *DB) getPreview(ctx context.Context, notFound, q string, args ...any) (store.Preview, error) {
	p, err := scanPreview(db.pool.QueryRow(ctx, q, args...))
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Preview{}, api.Errorf(api.CodeNotFound, "%s", notFound)
	}
	if err != nil {
		return store.Preview{}, fmt.Errorf("get preview: %w", err)
	}
	return p, nil
}

// ListPreviews lists a sandbox's previews, oldest first.
func (db *DB) ListPreviews(ctx context.Context, sandboxID string) ([]store.Preview, error) {
	ps, err := queryAll(ctx, db.pool, scanPreview, "SELECT "+previewColumns+", version FROM previews WHERE sandbox_id = $1 ORDER BY created_at, id", sandboxID)
	if err != nil {
		return nil, fmt.Errorf("list previews of %s: %w", sandboxID, err)
	}
	return ps, nil
}

// ListAllPreviews lists every sandbox's previews.
func (db *DB) ListAllPreviews(ctx context.Context) ([]store.Preview, error) {
	ps, err := queryAll(ctx, db.pool, scanPreview, "SELECT "+previewColumns+", version FROM previews ORDER BY sandbox_id, port")
	if err != nil {
		return nil, fmt.Errorf("list previews: %w", err)
	}
	return ps, nil
}

// DeletePreview removes a preview of the team.
func (db *DB) DeletePreview(ctx context.Context, teamID, id string) error {
	tag, err := db.pool.Exec(ctx, "DELETE FROM previews WHERE id = $1 AND team_id = $2", id, teamID)
	if err != nil {
		return fmt.Errorf("delete preview %s: %w", id, err)
	}
	return mustAffect(tag, api.Errorf(api.CodeNotFound, "preview %s not found", id))
}
