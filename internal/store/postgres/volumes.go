package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/store"
)

const volumeColumns = "id, team_id, name, size_mib, used_bytes, node, created_at"

func scanVolume(r scanner) (api.Volume, error) {
	var v api.Volume
	if err := r.Scan(&v.ID, &v.TeamID, &v.Name, &v.SizeMiB, &v.UsedBytes, &v.Node, &v.CreatedAt); err != nil {
		return api.Volume{}, err
	}
	v.CreatedAt = v.CreatedAt.UTC()
	v.Sandboxes = []string{}
	return v, nil
}

// CreateVolume stores a new volume.
func (db *DB) CreateVolume(ctx context.Context, v api.Volume) error {
	_, err := db.pool.Exec(ctx, `INSERT INTO volumes (`+volumeColumns+`) VALUES ($1, $2, $3, $4, $5, $6, $7)`,
		v.ID, v.TeamID, v.Name, v.SizeMiB, v.UsedBytes, v.Node, v.CreatedAt.UTC())
	switch violation(err) {
	case "unique", "primary":
		return api.Errorf(api.CodeConflict, "a volume named %q already exists", v.Name)
	case "foreign":
		return api.Errorf(api.CodeNotFound, "team %s not found", v.TeamID)
	}
	if err != nil {
		return fmt.Errorf("insert volume %s: %w", v.ID, err)
	}
	return nil
}

// GetVolume finds a volume of the team by ID or name.
func (db *DB) GetVolume(ctx context.Context, teamID, ref string) (api.Volume, error) {
	v, err := scanVolume(db.pool.QueryRow(ctx, `SELECT `+volumeColumns+` FROM volumes WHERE team_id = $1 AND (id = $2 OR name = $2)`, teamID, ref))
	if errors.Is(err, pgx.ErrNoRows) {
		return api.Volume{}, api.Errorf(api.CodeNotFound, "volume %s not found", ref)
	}
	if err != nil {
		return api.Volume{}, fmt.Errorf("get volume %s: %w", ref, err)
	}
	return v, nil
}

// ListVolumes lists a team's volumes by ID.
func (db *DB) ListVolumes(ctx context.Context, teamID, after string, limit int) ([]api.Volume, error) {
	var w where
	if teamID != "" {
		w.add("team_id = ?", teamID)
	}
	q, args := w.query("SELECT "+volumeColumns+" FROM volumes", after, limit)
	items, err := queryAll(ctx, db.pool, scanVolume, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list volumes: %w", err)
	}
	return items, nil
}

// DeleteVolume removes a volume of the team.
func (db *DB) DeleteVolume(ctx context.Context, teamID, id string) error {
	tag, err := db.pool.Exec(ctx, `DELETE FROM volumes WHERE id = $1 AND team_id = $2`, id, teamID)
	if err != nil {
		return fmt.Errorf("delete volume %s: %w", id, err)
	}
	return mustAffect(tag, api.Errorf(api.CodeNotFound, "volume %s not found", id))
}

// SetVolumeUsed records a volume's last measured use.
func (db *DB) SetVolumeUsed(ctx context.Context, id string, usedBytes int64) error {
	if _, err := db.pool.Exec(ctx, `UPDATE volumes SET used_bytes = $1 WHERE id = $2`, usedBytes, id); err != nil {
		return fmt.Errorf("use of volume %s: %w", id, err)
	}
	return nil
}

// VolumeTotals counts a team's volumes and sums their sizes.
func (db *DB) VolumeTotals(ctx context.Context, teamID string) (int, int64, error) {
	var n int
	var mib int64
	err := db.pool.QueryRow(ctx, `SELECT COUNT(*), COALESCE(SUM(size_mib), 0)::bigint FROM volumes WHERE team_id = $1`, teamID).Scan(&n, &mib)
	if err != nil {
		return 0, 0, fmt.Errorf("volumes of team %s: %w", teamID, err)
	}
	return n, mib, nil
}

// VolumeUsers lists the team's live sandboxes that mount a volume.
func (db *DB) VolumeUsers(ctx context.Context, teamID, volumeID string) ([]string, error) {
	rows, err := db.pool.Query(ctx, `SELECT id FROM sandboxes WHERE team_id = $1 AND state NOT IN ('terminated', 'failed')
		AND volumes @> jsonb_build_array(jsonb_build_object('volume_id', $2::text)) ORDER BY id`, teamID, volumeID)
	if err != nil {
		return nil, fmt.Errorf("users of volume %s: %w", volumeID, err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("users of volume %s: %w", volumeID, err)
	}
	if ids == nil {
		ids = []string{}
	}
	return ids, nil
}

var _ store.Volumes = (*DB)(nil)
