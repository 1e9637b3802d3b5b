package store

import (
	"context"
	"time"

	"github.com/cove-dev/cove/api"
)

// Assets is the part of Store that keeps assets and the setup cache
// (sources and setup, issue #13).
type Assets interface {
	// CreateAsset stores a new asset row; another row of the team with the
	// same SHA256 answers CodeConflict.
	CreateAsset(ctx context.Context, a api.Asset) error
	GetAsset(ctx context.Context, teamID, id string) (api.Asset, error)
	// GetAssetBySHA256 finds the team's asset with those bytes.
	GetAssetBySHA256(ctx context.Context, teamID, sha256 string) (api.Asset, error)
	// ListAssets lists a team's assets, oldest first, paged by ID.
	ListAssets(ctx context.Context, teamID, after string, limit int) ([]api.Asset, error)
	DeleteAsset(ctx context.Context, teamID, id string) error
	// AssetBytes is the size of all of a team's assets.
	AssetBytes(ctx context.Context, teamID string) (int64, error)

	// PutSetupCache stores or replaces the entry of the team under its key.
	PutSetupCache(ctx context.Context, e SetupCacheEntry) error
	GetSetupCache(ctx context.Context, teamID, key string) (SetupCacheEntry, error)
	// TouchSetupCache sets an entry's LastUsedAt.
	TouchSetupCache(ctx context.Context, teamID, key string, t time.Time) error
	// ListSetupCache lists a team's entries, least recently used first.
	ListSetupCache(ctx context.Context, teamID string) ([]SetupCacheEntry, error)
	DeleteSetupCache(ctx context.Context, teamID, key string) error
}

// SetupCacheEntry is a saved disk of a finished setup.
type SetupCacheEntry struct {
	TeamID     string
	Key        string
	SaveID     string // the name of the save in the node's save store
	Size       int64
	CreatedAt  time.Time
	LastUsedAt time.Time
}
