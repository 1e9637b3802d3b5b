package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

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
	return db.inTx(ctx, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO snapshots (id, team_id, name, sandbox_id, size, created_at, data) VALUES ($1, $2, $3, $4, $5, $6, $7)`,
			s.ID, s.TeamID, s.Name, s.SandboxID, s.SizeBytes, s.CreatedAt, data)
		switch violation(err) {
		case "unique", "primary":
			return api.Errorf(api.CodeConflict, "a snapshot named %q already exists", s.Name)
		case "foreign":
			return api.Errorf(api.CodeNotFound, "team %s not found", s.TeamID)
		}
		if err != nil {
			return fmt.Errorf("insert snapshot %s: %w", s.ID, err)
		}
		for _, l := range s.Layers {
			if l.Snapshot == s.ID {
				continue
			}
			if _, err := tx.Exec(ctx, `INSERT INTO snapshot_users (snapshot_id, user_id) VALUES ($1, $2) ON CONFLICT DO NOTHING`, l.Snapshot, s.ID); err != nil {
				return fmt.Errorf("snapshot %s stands on %s: %w", s.ID, l.Snapshot, err)
			}
		}
		return nil
	})
}

// GetSnapshot finds a snapshot of the team by ID or name.
func (db *DB) GetSnapshot(ctx context.Context, teamID, ref string) (store.Snapshot, error) {
	s, err := scanSnapshot(db.pool.QueryRow(ctx, `SELECT data FROM snapshots WHERE team_id = $1 AND (id = $2 OR name = $2)`, teamID, ref))
	if errors.Is(err, pgx.ErrNoRows) {
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
	items, err := queryAll(ctx, db.pool, scanSnapshot, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list snapshots: %w", err)
	}
	return items, nil
}

// TemplateSnapshots lists the snapshots of a template, by ID.
func (db *DB) TemplateSnapshots(ctx context.Context, teamID, template, qualified string) ([]store.Snapshot, error) {
	items, err := queryAll(ctx, db.pool, scanSnapshot, `SELECT data FROM snapshots
		WHERE (team_id = $1 AND data->>'template' = $2) OR data->>'template' = $3 ORDER BY id`,
		teamID, template, qualified)
	if err != nil {
		return nil, fmt.Errorf("snapshots of template %s: %w", template, err)
	}
	return items, nil
}

// DeleteSnapshot removes a snapshot row and what it stood on.
func (db *DB) DeleteSnapshot(ctx context.Context, teamID, id string) error {
	return db.inTx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `DELETE FROM snapshots WHERE id = $1 AND team_id = $2`, id, teamID)
		if err != nil {
			return fmt.Errorf("delete snapshot %s: %w", id, err)
		}
		if err := mustAffect(tag, api.Errorf(api.CodeNotFound, "snapshot %s not found", id)); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM snapshot_users WHERE user_id = $1 OR snapshot_id = $1`, id); err != nil {
			return fmt.Errorf("delete snapshot %s: %w", id, err)
		}
		return nil
	})
}

// SnapshotBytes sums the stored sizes of a team's snapshots.
func (db *DB) SnapshotBytes(ctx context.Context, teamID string) (int64, error) {
	var n int64
	if err := db.pool.QueryRow(ctx, `SELECT COALESCE(SUM(size), 0) FROM snapshots WHERE team_id = $1`, teamID).Scan(&n); err != nil {
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
	return db.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM snapshot_users WHERE user_id = $1`, sandboxID); err != nil {
			return fmt.Errorf("layers of %s: %w", sandboxID, err)
		}
		var err error
		if len(layers) == 0 {
			_, err = tx.Exec(ctx, `DELETE FROM sandbox_layers WHERE sandbox_id = $1`, sandboxID)
		} else {
			_, err = tx.Exec(ctx, `INSERT INTO sandbox_layers (sandbox_id, layers) VALUES ($1, $2)
				ON CONFLICT (sandbox_id) DO UPDATE SET layers = excluded.layers`, sandboxID, data)
		}
		if err != nil {
			return fmt.Errorf("layers of %s: %w", sandboxID, err)
		}
		for _, l := range layers {
			if _, err := tx.Exec(ctx, `INSERT INTO snapshot_users (snapshot_id, user_id) VALUES ($1, $2) ON CONFLICT DO NOTHING`, l.Snapshot, sandboxID); err != nil {
				return fmt.Errorf("layers of %s: %w", sandboxID, err)
			}
		}
		return nil
	})
}

// SandboxLayers returns the chain a sandbox stands on.
func (db *DB) SandboxLayers(ctx context.Context, sandboxID string) ([]store.Layer, error) {
	var data string
	err := db.pool.QueryRow(ctx, `SELECT layers FROM sandbox_layers WHERE sandbox_id = $1`, sandboxID).Scan(&data)
	if errors.Is(err, pgx.ErrNoRows) {
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
	rows, err := db.pool.Query(ctx, `SELECT u.user_id FROM snapshot_users u WHERE u.snapshot_id = $1 AND (
		EXISTS (SELECT 1 FROM sandboxes s WHERE s.id = u.user_id AND s.state NOT IN ('terminated', 'failed'))
		OR EXISTS (SELECT 1 FROM snapshots p WHERE p.id = u.user_id)) ORDER BY u.user_id`, snapshotID)
	if err != nil {
		return nil, fmt.Errorf("users of snapshot %s: %w", snapshotID, err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("users of snapshot %s: %w", snapshotID, err)
	}
	if ids == nil {
		ids = []string{}
	}
	return ids, nil
}
