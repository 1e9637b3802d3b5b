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

const assetColumns = `id, team_id, name, size, sha256, created_at`

func scanAsset(r scanner) (api.Asset, error) {
	var a api.Asset
	var created string
	if err := r.Scan(&a.ID, &a.TeamID, &a.Name, &a.Size, &a.SHA256, &created); err != nil {
		return api.Asset{}, err
	}
	var d decoder
	a.CreatedAt = d.time(created)
	if d.err != nil {
		return api.Asset{}, fmt.Errorf("asset %s: %w", a.ID, d.err)
	}
	return a, nil
}

// CreateAsset stores a new asset row.
func (db *DB) CreateAsset(ctx context.Context, a api.Asset) error {
	_, err := db.write.ExecContext(ctx, `INSERT INTO assets (`+assetColumns+`) VALUES (?, ?, ?, ?, ?, ?)`,
		a.ID, a.TeamID, a.Name, a.Size, a.SHA256, formatTime(a.CreatedAt))
	switch sqliteCode(err) {
	case uniqueViolation, primaryKeyViolation:
		return api.Errorf(api.CodeConflict, "an asset with sha-256 %s already exists", a.SHA256)
	case foreignKeyViolation:
		return api.Errorf(api.CodeNotFound, "team %s not found", a.TeamID)
	}
	if err != nil {
		return fmt.Errorf("insert asset %s: %w", a.ID, err)
	}
	return nil
}

func (db *DB) oneAsset(ctx context.Context, what, query string, args ...any) (api.Asset, error) {
	a, err := scanAsset(db.read.QueryRowContext(ctx, "SELECT "+assetColumns+" FROM assets WHERE "+query, args...))
	if errors.Is(err, sql.ErrNoRows) {
		return api.Asset{}, api.Errorf(api.CodeNotFound, "asset %s not found", what)
	}
	if err != nil {
		return api.Asset{}, fmt.Errorf("get asset %s: %w", what, err)
	}
	return a, nil
}

// GetAsset finds an asset of the team.
func (db *DB) GetAsset(ctx context.Context, teamID, id string) (api.Asset, error) {
	return db.oneAsset(ctx, id, "id = ? AND team_id = ?", id, teamID)
}

// GetAssetBySHA256 finds the team's asset with those bytes.
func (db *DB) GetAssetBySHA256(ctx context.Context, teamID, sum string) (api.Asset, error) {
	return db.oneAsset(ctx, "with sha-256 "+sum, "team_id = ? AND sha256 = ?", teamID, sum)
}

// ListAssets lists a team's assets by ID.
func (db *DB) ListAssets(ctx context.Context, teamID, after string, limit int) ([]api.Asset, error) {
	var w where
	w.add("team_id = ?", teamID)
	q, args := w.query("SELECT "+assetColumns+" FROM assets", after, limit)
	items, err := queryAll(ctx, db.read, scanAsset, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list assets: %w", err)
	}
	return items, nil
}

// DeleteAsset removes an asset row.
func (db *DB) DeleteAsset(ctx context.Context, teamID, id string) error {
	res, err := db.write.ExecContext(ctx, `DELETE FROM assets WHERE id = ? AND team_id = ?`, id, teamID)
	if err != nil {
		return fmt.Errorf("delete asset %s: %w", id, err)
	}
	return mustAffect(res, api.Errorf(api.CodeNotFound, "asset %s not found", id))
}

// AssetBytes sums the sizes of a team's assets.
func (db *DB) AssetBytes(ctx context.Context, teamID string) (int64, error) {
	var n int64
	err := db.read.QueryRowContext(ctx, `SELECT COALESCE(SUM(size), 0) FROM assets WHERE team_id = ?`, teamID).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("sum asset sizes: %w", err)
	}
	return n, nil
}

const setupCacheColumns = `team_id, key, save_id, size, created_at, last_used_at`

func scanSetupCache(r scanner) (store.SetupCacheEntry, error) {
	var e store.SetupCacheEntry
	var created, used string
	if err := r.Scan(&e.TeamID, &e.Key, &e.SaveID, &e.Size, &created, &used); err != nil {
		return e, err
	}
	var d decoder
	e.CreatedAt = d.time(created)
	e.LastUsedAt = d.time(used)
	if d.err != nil {
		return e, fmt.Errorf("setup cache %s: %w", e.Key, d.err)
	}
	return e, nil
}

// PutSetupCache stores or replaces a cache entry.
func (db *DB) PutSetupCache(ctx context.Context, e store.SetupCacheEntry) error {
	_, err := db.write.ExecContext(ctx, `INSERT INTO setup_cache (`+setupCacheColumns+`) VALUES (?, ?, ?, ?, ?, ?)
		ON CONFLICT (team_id, key) DO UPDATE SET save_id = excluded.save_id, size = excluded.size,
		created_at = excluded.created_at, last_used_at = excluded.last_used_at`,
		e.TeamID, e.Key, e.SaveID, e.Size, formatTime(e.CreatedAt), formatTime(e.LastUsedAt))
	if sqliteCode(err) == foreignKeyViolation {
		return api.Errorf(api.CodeNotFound, "team %s not found", e.TeamID)
	}
	if err != nil {
		return fmt.Errorf("put setup cache %s: %w", e.Key, err)
	}
	return nil
}

// GetSetupCache finds a team's entry by key.
func (db *DB) GetSetupCache(ctx context.Context, teamID, key string) (store.SetupCacheEntry, error) {
	e, err := scanSetupCache(db.read.QueryRowContext(ctx,
		"SELECT "+setupCacheColumns+" FROM setup_cache WHERE team_id = ? AND key = ?", teamID, key))
	if errors.Is(err, sql.ErrNoRows) {
		return e, api.Errorf(api.CodeNotFound, "no cached setup under %s", key)
	}
	if err != nil {
		return e, fmt.Errorf("get setup cache %s: %w", key, err)
	}
	return e, nil
}

// TouchSetupCache records a use of an entry.
func (db *DB) TouchSetupCache(ctx context.Context, teamID, key string, t time.Time) error {
	res, err := db.write.ExecContext(ctx, `UPDATE setup_cache SET last_used_at = ? WHERE team_id = ? AND key = ?`,
		formatTime(t), teamID, key)
	if err != nil {
		return fmt.Errorf("touch setup cache %s: %w", key, err)
	}
	return mustAffect(res, api.Errorf(api.CodeNotFound, "no cached setup under %s", key))
}

// ListSetupCache lists a team's entries, least recently used first.
func (db *DB) ListSetupCache(ctx context.Context, teamID string) ([]store.SetupCacheEntry, error) {
	items, err := queryAll(ctx, db.read, scanSetupCache,
		"SELECT "+setupCacheColumns+" FROM setup_cache WHERE team_id = ? ORDER BY last_used_at, key", teamID)
	if err != nil {
		return nil, fmt.Errorf("list setup cache: %w", err)
	}
	return items, nil
}

// DeleteSetupCache removes an entry.
func (db *DB) DeleteSetupCache(ctx context.Context, teamID, key string) error {
	res, err := db.write.ExecContext(ctx, `DELETE FROM setup_cache WHERE team_id = ? AND key = ?`, teamID, key)
	if err != nil {
		return fmt.Errorf("delete setup cache %s: %w", key, err)
	}
	return mustAffect(res, api.Errorf(api.CodeNotFound, "no cached setup under %s", key))
}
