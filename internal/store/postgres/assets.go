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

const assetColumns = `id, team_id, name, size, sha256, created_at`

func scanAsset(r scanner) (api.Asset, error) {
	var a api.Asset
	if err := r.Scan(&a.ID, &a.TeamID, &a.Name, &a.Size, &a.SHA256, &a.CreatedAt); err != nil {
		return api.Asset{}, err
	}
	return a, nil
}

// CreateAsset stores a new asset row.
func (db *DB) CreateAsset(ctx context.Context, a api.Asset) error {
	_, err := db.pool.Exec(ctx, `INSERT INTO assets (`+assetColumns+`) VALUES ($1, $2, $3, $4, $5, $6)`,
		a.ID, a.TeamID, a.Name, a.Size, a.SHA256, a.CreatedAt)
	switch violation(err) {
	case "unique", "primary":
		return api.Errorf(api.CodeConflict, "an asset with sha-256 %s already exists", a.SHA256)
	case "foreign":
		return api.Errorf(api.CodeNotFound, "team %s not found", a.TeamID)
	}
	if err != nil {
		return fmt.Errorf("insert asset %s: %w", a.ID, err)
	}
	return nil
}

func (db *DB) oneAsset(ctx context.Context, what, query string, args ...any) (api.Asset, error) {
	a, err := scanAsset(db.pool.QueryRow(ctx, "SELECT "+assetColumns+" FROM assets WHERE "+query, args...))
	if errors.Is(err, pgx.ErrNoRows) {
		return api.Asset{}, api.Errorf(api.CodeNotFound, "asset %s not found", what)
	}
	if err != nil {
		return api.Asset{}, fmt.Errorf("get asset %s: %w", what, err)
	}
	return a, nil
}

// GetAsset finds an asset of the team.
func (db *DB) GetAsset(ctx context.Context, teamID, id string) (api.Asset, error) {
	return db.oneAsset(ctx, id, "id = $1 AND team_id = $2", id, teamID)
}

// GetAssetBySHA256 finds the team's asset with those bytes.
func (db *DB) GetAssetBySHA256(ctx context.Context, teamID, sum string) (api.Asset, error) {
	return db.oneAsset(ctx, "with sha-256 "+sum, "team_id = $1 AND sha256 = $2", teamID, sum)
}

// ListAssets lists a team's assets by ID.
func (db *DB) ListAssets(ctx context.Context, teamID, after string, limit int) ([]api.Asset, error) {
	var w where
	w.add("team_id = ?", teamID)
	q, args := w.query("SELECT "+assetColumns+" FROM assets", after, limit)
	items, err := queryAll(ctx, db.pool, scanAsset, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list assets: %w", err)
	}
	return items, nil
}

// DeleteAsset removes an asset row.
func (db *DB) DeleteAsset(ctx context.Context, teamID, id string) error {
	tag, err := db.pool.Exec(ctx, `DELETE FROM assets WHERE id = $1 AND team_id = $2`, id, teamID)
	if err != nil {
		return fmt.Errorf("delete asset %s: %w", id, err)
	}
	return mustAffect(tag, api.Errorf(api.CodeNotFound, "asset %s not found", id))
}

// AssetBytes sums the sizes of a team's assets.
func (db *DB) AssetBytes(ctx context.Context, teamID string) (int64, error) {
	var n int64
	err := db.pool.QueryRow(ctx, `SELECT COALESCE(SUM(size), 0)::bigint FROM assets WHERE team_id = $1`, teamID).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("sum asset sizes: %w", err)
	}
	return n, nil
}

const setupCacheColumns = `team_id, key, save_id, size, created_at, last_used_at`

func scanSetupCache(r scanner) (store.SetupCacheEntry, error) {
	var e store.SetupCacheEntry
	err := r.Scan(&e.TeamID, &e.Key, &e.SaveID, &e.Size, &e.CreatedAt, &e.LastUsedAt)
	return e, err
}

// PutSetupCache stores or replaces a cache entry.
func (db *DB) PutSetupCache(ctx context.Context, e store.SetupCacheEntry) error {
	_, err := db.pool.Exec(ctx, `INSERT INTO setup_cache (`+setupCacheColumns+`) VALUES ($1, $2, $3, $4, $5, $6)
		ON CONFLICT (team_id, key) DO UPDATE SET save_id = excluded.save_id, size = excluded.size,
		created_at = excluded.created_at, last_used_at = excluded.last_used_at`,
		e.TeamID, e.Key, e.SaveID, e.Size, e.CreatedAt, e.LastUsedAt)
	if violation(err) == "foreign" {
		return api.Errorf(api.CodeNotFound, "team %s not found", e.TeamID)
	}
	if err != nil {
		return fmt.Errorf("put setup cache %s: %w", e.Key, err)
	}
	return nil
}

// GetSetupCache finds a team's entry by key.
func (db *DB) GetSetupCache(ctx context.Context, teamID, key string) (store.SetupCacheEntry, error) {
	e, err := scanSetupCache(db.pool.QueryRow(ctx,
		"SELECT "+setupCacheColumns+" FROM setup_cache WHERE team_id = $1 AND key = $2", teamID, key))
	if errors.Is(err, pgx.ErrNoRows) {
		return e, api.Errorf(api.CodeNotFound, "no cached setup under %s", key)
	}
	if err != nil {
		return e, fmt.Errorf("get setup cache %s: %w", key, err)
	}
	return e, nil
}

// TouchSetupCache records a use of an entry.
func (db *DB) TouchSetupCache(ctx context.Context, teamID, key string, t time.Time) error {
	tag, err := db.pool.Exec(ctx, `UPDATE setup_cache SET last_used_at = $1 WHERE team_id = $2 AND key = $3`, t, teamID, key)
	if err != nil {
		return fmt.Errorf("touch setup cache %s: %w", key, err)
	}
	return mustAffect(tag, api.Errorf(api.CodeNotFound, "no cached setup under %s", key))
}

// ListSetupCache lists a team's entries, least recently used first.
func (db *DB) ListSetupCache(ctx context.Context, teamID string) ([]store.SetupCacheEntry, error) {
	items, err := queryAll(ctx, db.pool, scanSetupCache,
		"SELECT "+setupCacheColumns+" FROM setup_cache WHERE team_id = $1 ORDER BY last_used_at, key", teamID)
	if err != nil {
		return nil, fmt.Errorf("list setup cache: %w", err)
	}
	return items, nil
}

// DeleteSetupCache removes an entry.
func (db *DB) DeleteSetupCache(ctx context.Context, teamID, key string) error {
	tag, err := db.pool.Exec(ctx, `DELETE FROM setup_cache WHERE team_id = $1 AND key = $2`, teamID, key)
	if err != nil {
		return fmt.Errorf("delete setup cache %s: %w", key, err)
	}
	return mustAffect(tag, api.Errorf(api.CodeNotFound, "no cached setup under %s", key))
}
