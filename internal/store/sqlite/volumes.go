package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/store"
)

const volumeColumns = "id, team_id, name, size_mib, used_bytes, node, created_at"

func scanVolume(r scanner) (api.Volume, error) {
	var v api.Volume
	var created string
	if err := r.Scan(&v.ID, &v.TeamID, &v.Name, &v.SizeMiB, &v.UsedBytes, &v.Node, &created); err != nil {
		return api.Volume{}, err
	}
	var d decoder
	v.CreatedAt = d.time(created)
	v.Sandboxes = []string{}
	return v, d.err
}

// CreateVolume stores a new volume.
func (db *DB) CreateVolume(ctx context.Context, v api.Volume) error {
	_, err := db.write.ExecContext(ctx, `INSERT INTO volumes (`+volumeColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?)`,
		v.ID, v.TeamID, v.Name, v.SizeMiB, v.UsedBytes, v.Node, formatTime(v.CreatedAt))
	switch sqliteCode(err) {
	case uniqueViolation, primaryKeyViolation:
		return api.Errorf(api.CodeConflict, "a volume named %q already exists", v.Name)
	case foreignKeyViolation:
		return api.Errorf(api.CodeNotFound, "team %s not found", v.TeamID)
	}
	if err != nil {
		return fmt.Errorf("insert volume %s: %w", v.ID, err)
	}
	return nil
}

// GetVolume finds a volume of the team by ID or name.
func (db *DB) GetVolume(ctx context.Context, teamID, ref string) (api.Volume, error) {
	v, err := scanVolume(db.read.QueryRowContext(ctx, `SELECT `+volumeColumns+` FROM volumes WHERE team_id = ? AND (id = ? OR name = ?)`, teamID, ref, ref))
	if errors.Is(err, sql.ErrNoRows) {
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
	items, err := queryAll(ctx, db.read, scanVolume, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list volumes: %w", err)
	}
	return items, nil
}

// DeleteVolume removes a volume of the team.
func (db *DB) DeleteVolume(ctx context.Context, teamID, id string) error {
	res, err := db.write.ExecContext(ctx, `DELETE FROM volumes WHERE id = ? AND team_id = ?`, id, teamID)
	if err != nil {
		return fmt.Errorf("delete volume %s: %w", id, err)
	}
	return mustAffect(res, api.Errorf(api.CodeNotFound, "volume %s not found", id))
}

// SetVolumeUsed records a volume's last measured use.
func (db *DB) SetVolumeUsed(ctx context.Context, id string, usedBytes int64) error {
	if _, err := db.write.ExecContext(ctx, `UPDATE volumes SET used_bytes = ? WHERE id = ?`, usedBytes, id); err != nil {
		return fmt.Errorf("use of volume %s: %w", id, err)
	}
	return nil
}

// VolumeTotals counts a team's volumes and sums their sizes.
func (db *DB) VolumeTotals(ctx context.Context, teamID string) (int, int64, error) {
	var n int
	var mib int64
	err := db.read.QueryRowContext(ctx, `SELECT COUNT(*), COALESCE(SUM(size_mib), 0) FROM volumes WHERE team_id = ?`, teamID).Scan(&n, &mib)
	if err != nil {
		return 0, 0, fmt.Errorf("volumes of team %s: %w", teamID, err)
	}
	return n, mib, nil
}

// VolumeUsers lists the team's live sandboxes that mount a volume.
func (db *DB) VolumeUsers(ctx context.Context, teamID, volumeID string) ([]string, error) {
	rows, err := db.read.QueryContext(ctx, `SELECT s.id FROM sandboxes s WHERE s.team_id = ? AND s.state NOT IN ('terminated', 'failed')
		AND s.volumes <> '[]' AND EXISTS (SELECT 1 FROM json_each(s.volumes) m WHERE json_extract(m.value, '$.volume_id') = ?) ORDER BY s.id`, teamID, volumeID)
	if err != nil {
		return nil, fmt.Errorf("users of volume %s: %w", volumeID, err)
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

var _ store.Volumes = (*DB)(nil)
