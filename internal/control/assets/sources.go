package assets

import (
	"context"
	"fmt"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/node"
)

// Land extracts a team's asset into a folder of a started sandbox (or
// workload), owned by owner (the template's default user), the bytes
// checked against the asset's digest on the way: damaged bytes extract
// nothing. It returns the asset's digest.
func (s *Service) Land(ctx context.Context, teamID, targetID, dir, assetID string, owner node.User) (string, error) {
	if err := s.configured(); err != nil {
		return "", err
	}
	a, err := s.store.GetAsset(ctx, teamID, assetID)
	if err != nil {
		return "", err
	}
	rc, err := s.blobs.Open(ctx, teamID, a.SHA256)
	if err != nil {
		return "", err
	}
	defer rc.Close()
	if _, err := s.node.WriteArchive(ctx, targetID, node.ArchiveSpec{Path: dir, UID: owner.UID, GID: owner.GID}, rc); err != nil {
		return "", fmt.Errorf("extract asset %s: %w", a.ID, err)
	}
	return a.SHA256, nil
}

// CheckSource refuses, at create, an asset source whose asset the team
// does not have.
func (s *Service) CheckSource(ctx context.Context, teamID string, src *api.Source) error {
	if src == nil || src.Type != api.SourceAsset {
		return nil
	}
	if err := s.configured(); err != nil {
		return err
	}
	if _, err := s.GetAsset(ctx, teamID, src.AssetID); err != nil {
		if api.ErrorCode(err) == api.CodeNotFound {
			return api.Errorf(api.CodeNotFound, "source.asset_id: asset %q not found; list your assets with GET /v1/assets", src.AssetID)
		}
		return err
	}
	return nil
}
