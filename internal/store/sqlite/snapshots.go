package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/store"
)

func scanSnapshot(r scanner) (store.Snapshot, error) {
	var data string
	if err := r.Scan(&data); err != nil {
		return store.Snapshot{}, err
	}
	var s store.Snapshot
	var d decoder
	d.json(data, &s)
	if s.Layers == nil {
		s.Layers = []store.Layer{}
	}
	return s, d.err
}

// CreateSnapshot stores a new snapshot and what it stands on.
func (db *DB) CreateSnapshot(ctx context.Context, s store.Snapshot) error {
	s.CreatedAt = s.CreatedAt.UTC()
	data, err := encodeJSON(s)
	if err != nil {
		return err
	}
	tx, err := db.write.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	_, err = tx.ExecContext(ctx, `INSERT INTO snapshots (id, team_id, name, sandbox_id, size, created_at, data) VALUES (?, ?, ?, ?, ?, ?, ?)`,
		s.ID, s.TeamID, s.Name, s.SandboxID, s.SizeBytes, formatTime(s.CreatedAt), data)
	switch sqliteCode(err) {
	case uniqueViolation, primaryKeyViolation:
		return api.Errorf(api.CodeConflict, "a snapshot named %q already exists", s.Name)
	case foreignKeyViolation:
		return api.Errorf(api.CodeNotFound, "team %s not found", s.TeamID)
	}
	if err != nil {
		return fmt.Errorf("insert snapshot %s: %w", s.ID, err)
	}
	for _, l := range s.Layers {
		if l.Snapshot == s.ID {
			continue
		}
		if _, err := tx.ExecContext(ctx, `INSERT OR IGNORE INTO snapshot_users (snapshot_id, user_id) VALUES (?, ?)`, l.Snapshot, s.ID); err != nil {
			return fmt.Errorf("snapshot %s stands on %s: %w", s.ID, l.Snapshot, err)
		}
	}
	return tx.Commit()
}

// GetSnapshot finds a snapshot of the team by ID or name.
func (db *DB) GetSnapshot(ctx context.Context, teamID, ref string) (store.Snapshot, error) {
	s, err := scanSnapshot(db.read.QueryRowContext(ctx, `SELECT data FROM snapshots WHERE team_id = ? AND (id = ? OR name = ?)`, teamID, ref, ref))
	if errors.Is(err, sql.ErrNoRows) {
		return store.Snapshot{}, api.Errorf(api.CodeNotFound, "snapshot %s not found", ref)
	}
	if err != nil {
		return store.Snapshot{}, fmt.Errorf("get snapshot %s: %w", ref, err)
	}
	return s, nil
}

// ListSnapshots lists a team's snapshots by ID.
func (db *DB) ListSnapshots(ctx context.Context, teamID, sandboxID, after string, limit int) ([]store.Snapshot, error) {
	var w where
	if teamID != "" {
		w.add("team_id = ?", teamID)
	}
	if sandboxID != "" {
		w.add("sandbox_id = ?", sandboxID)
	}
	q, args := w.query("SELECT data FROM snapshots", after, limit)
	items, err := queryAll(ctx, db.read, scanSnapshot, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list snapshots: %w", err)
	}
	return items, nil
}

// TemplateSnapshots lists the snapshots of a template, by ID.
func (db *DB) TemplateSnapshots(ctx context.Context, teamID, template, qualified string) ([]store.Snapshot, error) {
	items, err := queryAll(ctx, db.read, scanSnapshot, `SELECT data FROM snapshots
		WHERE (team_id = ? AND json_extract(data, '$.template') = ?) OR json_extract(data, '$.template') = ? ORDER BY id`,
		teamID, template, qualified)
	if err != nil {
		return nil, fmt.Errorf("snapshots of template %s: %w", template, err)
	}
	return items, nil
}

// DeleteSnapshot removes a snapshot row and what it stood on.
func (db *DB) DeleteSnapshot(ctx context.Context, teamID, id string) error {
	tx, err := db.write.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, `DELETE FROM snapshots WHERE id = ? AND team_id = ?`, id, teamID)
	if err != nil {
		return fmt.Errorf("delete snapshot %s: %w", id, err)
	}
	if err := mustAffect(res, api.Errorf(api.CodeNotFound, "snapshot %s not found", id)); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM snapshot_users WHERE user_id = ? OR snapshot_id = ?`, id, id); err != nil {
		return fmt.Errorf("delete snapshot %s: %w", id, err)
	}
	return tx.Commit()
}

// SnapshotBytes sums the stored sizes of a team's snapshots.
func (db *DB) SnapshotBytes(ctx context.Context, teamID string) (int64, error) {
	var n int64
	err := db.read.QueryRowContext(ctx, `SELECT COALESCE(SUM(size), 0) FROM snapshots WHERE team_id = ?`, teamID).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("sum snapshot sizes: %w", err)
	}
	return n, nil
}

// SetSandboxLayers records the chain a sandbox stands on.
func (db *DB) SetSandboxLayers(ctx context.Context, sandboxID string, layers []store.Layer) error {
	data, err := encodeJSON(layers)
	if err != nil {
		return err
	}
	tx, err := db.write.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `DELETE FROM snapshot_users WHERE user_id = ?`, sandboxID); err != nil {
		return fmt.Errorf("layers of %s: %w", sandboxID, err)
	}
	if len(layers) == 0 {
		_, err = tx.ExecContext(ctx, `DELETE FROM sandbox_layers WHERE sandbox_id = ?`, sandboxID)
	} else {
		_, err = tx.ExecContext(ctx, `INSERT INTO sandbox_layers (sandbox_id, layers) VALUES (?, ?)
			ON CONFLICT (sandbox_id) DO UPDATE SET layers = excluded.layers`, sandboxID, data)
	}
	if err != nil {
		return fmt.Errorf("layers of %s: %w", sandboxID, err)
	}
	for _, l := range layers {
		if _, err := tx.ExecContext(ctx, `INSERT OR IGNORE INTO snapshot_users (snapshot_id, user_id) VALUES (?, ?)`, l.Snapshot, sandboxID); err != nil {
			return fmt.Errorf("layers of %s: %w", sandboxID, err)
		}
	}
	return tx.Commit()
}

// SandboxLayers returns the chain a sandbox stands on.
func (db *DB) SandboxLayers(ctx context.Context, sandboxID string) ([]store.Layer, error) {
	var data string
	err := db.read.QueryRowContext(ctx, `SELECT layers FROM sandbox_layers WHERE sandbox_id = ?`, sandboxID).Scan(&data)
	if errors.Is(err, sql.ErrNoRows) {
		return []store.Layer{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("layers of %s: %w", sandboxID, err)
	}
	var ls []store.Layer
	var d decoder
	d.json(data, &ls)
	if ls == nil {
		ls = []store.Layer{}
	}
	return ls, d.err
}

// SnapshotUsers lists the live sandboxes and the snapshots standing on a
// snapshot.
func (db *DB) SnapshotUsers(ctx context.Context, snapshotID string) ([]string, error) {
	rows, err := db.read.QueryContext(ctx, `SELECT u.user_id FROM snapshot_users u WHERE u.snapshot_id = ? AND (
		EXISTS (SELECT 1 FROM sandboxes s WHERE s.id = u.user_id AND s.state NOT IN ('terminated', 'failed'))
		OR EXISTS (SELECT 1 FROM snapshots p WHERE p.id = u.user_id)) ORDER BY u.user_id`, snapshotID)
	if err != nil {
		return nil, fmt.Errorf("users of snapshot %s: %w", snapshotID, err)
	}
	defer rows.Close()
	ids := []string{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}
