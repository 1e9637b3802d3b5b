package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/store"
)

const previewColumns = "id, team_id, sandbox_id, port, visibility, wake, token_hash, created_at, version"

func scanPreview(r scanner) (store.Preview, error) {
	var p store.Preview
	var created string
	if err := r.Scan(&p.ID, &p.TeamID, &p.SandboxID, &p.Port, &p.Visibility, &p.Wake, &p.TokenHash, &created, &p.Version); err != nil {
		return store.Preview{}, err
	}
	var d decoder
	p.CreatedAt = d.time(created)
	return p, d.err
}

// CreatePreview stores a preview of an existing sandbox.
func (db *DB) CreatePreview(ctx context.Context, p store.Preview) error {
	_, err := db.write.ExecContext(ctx, "INSERT INTO previews ("+previewColumns+") VALUES (?, ?, ?, ?, ?, ?, ?, ?, 1)",
		p.ID, p.TeamID, p.SandboxID, p.Port, p.Visibility, p.Wake, p.TokenHash, formatTime(p.CreatedAt))
	switch sqliteCode(err) {
	case uniqueViolation:
		return api.Errorf(api.CodeConflict, "sandbox %s already has a preview of port %d", p.SandboxID, p.Port)
	case primaryKeyViolation:
		return api.Errorf(api.CodeConflict, "preview %s already exists", p.ID)
	case foreignKeyViolation:
		return api.Errorf(api.CodeNotFound, "sandbox %s not found", p.SandboxID)
	}
	if err != nil {
		return fmt.Errorf("insert preview %s: %w", p.ID, err)
	}
	return nil
}

// GetPreview finds a preview of the team (any team's for "").
func (db *DB) GetPreview(ctx context.Context, teamID, id string) (store.Preview, error) {
	q, args := "SELECT "+previewColumns+" FROM previews WHERE id = ?", []any{id}
	if teamID != "" {
		q, args = q+" AND team_id = ?", append(args, teamID)
	}
	return db.getPreview(ctx, fmt.Sprintf("preview %s not found", id), q, args...)
}

// PreviewByPort finds the preview of a sandbox's port.
func (db *DB) PreviewByPort(ctx context.Context, sandboxID string, port int) (store.Preview, error) {
	return db.getPreview(ctx, fmt.Sprintf("sandbox %s publishes no port %d", sandboxID, port),
		"SELECT "+previewColumns+" FROM previews WHERE sandbox_id = ? AND port = ?", sandboxID, port)
}

func (db *DB) getPreview(ctx context.Context, notFound, q string, args ...any) (store.Preview, error) {
	p, err := scanPreview(db.read.QueryRowContext(ctx, q, args...))
	if errors.Is(err, sql.ErrNoRows) {
		return store.Preview{}, api.Errorf(api.CodeNotFound, "%s", notFound)
	}
	if err != nil {
		return store.Preview{}, fmt.Errorf("get preview: %w", err)
	}
	return p, nil
}

// ListPreviews lists a sandbox's previews, oldest first.
func (db *DB) ListPreviews(ctx context.Context, sandboxID string) ([]store.Preview, error) {
	ps, err := queryAll(ctx, db.read, scanPreview, "SELECT "+previewColumns+" FROM previews WHERE sandbox_id = ? ORDER BY created_at, id", sandboxID)
	if err != nil {
		return nil, fmt.Errorf("list previews of %s: %w", sandboxID, err)
	}
	return ps, nil
}

// ListAllPreviews lists every sandbox's previews.
func (db *DB) ListAllPreviews(ctx context.Context) ([]store.Preview, error) {
	ps, err := queryAll(ctx, db.read, scanPreview, "SELECT "+previewColumns+" FROM previews ORDER BY sandbox_id, port")
	if err != nil {
		return nil, fmt.Errorf("list previews: %w", err)
	}
	return ps, nil
}

// DeletePreview removes a preview of the team.
func (db *DB) DeletePreview(ctx context.Context, teamID, id string) error {
	res, err := db.write.ExecContext(ctx, "DELETE FROM previews WHERE id = ? AND team_id = ?", id, teamID)
	if err != nil {
		return fmt.Errorf("delete preview %s: %w", id, err)
	}
	return mustAffect(res, api.Errorf(api.CodeNotFound, "preview %s not found", id))
}

// SetTeamAdmission replaces a team's admission flags.
func (db *DB) SetTeamAdmission(ctx context.Context, teamID string, a api.Admission) error {
	admission, err := encodeJSON(a)
	if err != nil {
		return err
	}
	res, err := db.write.ExecContext(ctx, "UPDATE teams SET admission = ? WHERE id = ?", admission, teamID)
	if err != nil {
		return fmt.Errorf("set admission of %s: %w", teamID, err)
	}
	return mustAffect(res, api.Errorf(api.CodeNotFound, "team %s not found", teamID))
}
