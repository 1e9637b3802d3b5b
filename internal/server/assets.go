package server

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"math"
	"regexp"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/id"
	"github.com/cove-dev/cove/internal/node"
)

// AssetBlobs keeps assets' bytes, content-addressed per team
// (internal/sources.Blobs on the node's disk; a bucket in a fleet).
type AssetBlobs interface {
	// Put stores at most max bytes of r for the team and returns their
	// sha-256 (hex) and size; it refuses what is not a tar or tar.gz whose
	// entries stay in their folder. Nothing is kept on failure.
	Put(teamID string, r io.Reader, max int64, want string) (sum string, size int64, err error)
	// Open reads the bytes back; the reader fails at its end when they
	// are no longer those of sum.
	Open(teamID, sum string) (io.ReadCloser, error)
	Remove(teamID, sum string) error
}

// SetAssetBlobs connects the asset store; without one, asset calls and
// asset sources answer 422.
func (s *Server) SetAssetBlobs(b AssetBlobs) { s.blobs = b }

func (s *Server) assetsConfigured() error {
	if s.blobs == nil {
		return api.Errorf(api.CodeUnprocessable, "assets are not configured on this server")
	}
	return nil
}

var assetNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// AssetUpload is a POST /v1/assets.
type AssetUpload struct {
	Name string
	// SHA256 (hex) the archive must have when known before the body;
	// Trailer returns it after the body.
	SHA256  string
	Trailer func() (string, error)
	// Size is the body's length when the client said it (Content-Length),
	// else 0: a known size is reserved whole before the first byte, so
	// uploads that together do not fit are refused at once rather than
	// all failing part way.
	Size int64
}

// CreateAsset stores an archive (tar or tar.gz) as an asset of the team.
// The same bytes are stored once: sending them again answers the asset
// that has them (created false), under its first name.
func (s *Server) CreateAsset(ctx context.Context, teamID string, req AssetUpload, body io.Reader) (api.Asset, bool, error) {
	if err := scoped(teamID); err != nil {
		return api.Asset{}, false, err
	}
	if err := s.assetsConfigured(); err != nil {
		return api.Asset{}, false, err
	}
	if req.Name != "" && !assetNameRE.MatchString(req.Name) {
		return api.Asset{}, false, invalid("asset name %q is invalid: use 1-128 letters, digits and '._-', starting with a letter or digit", req.Name)
	}
	// The team's cap is checked as the bytes arrive (u), together with
	// its other uploads in flight, not once before: parallel uploads
	// cannot each pass it.
	u, err := s.beginUpload(teamID, uploadAsset)
	if err != nil {
		return api.Asset{}, false, err
	}
	defer u.end()
	if req.Size > 0 {
		if err := u.reserve(ctx, req.Size); err != nil {
			return api.Asset{}, false, err
		}
	}
	cr := &checkedReader{r: u.reader(ctx, body), h: sha256.New(), max: math.MaxInt64, want: req.SHA256, trailer: req.Trailer}
	sum, size, err := s.blobs.Put(teamID, cr, s.cfg.MaxSourceBytes, "")
	if cr.err != nil {
		return api.Asset{}, false, cr.err
	}
	if err != nil {
		return api.Asset{}, false, err
	}
	return s.recordAsset(ctx, teamID, req.Name, sum, size)
}

func (s *Server) storageFull(used int64) error {
	return &api.Error{
		Code: api.CodeInsufficientStorage,
		Message: fmt.Sprintf("the team's assets use %d of its %d bytes; delete assets (DELETE /v1/assets/{id}) to make room",
			used, s.cfg.MaxTeamAssetBytes),
		Details: map[string]any{"used_bytes": used, "limit_bytes": s.cfg.MaxTeamAssetBytes},
	}
}

// recordAsset stores the row of bytes that are in the blob store, or
// answers the asset that has them already.
func (s *Server) recordAsset(ctx context.Context, teamID, name, sum string, size int64) (api.Asset, bool, error) {
	if a, err := s.store.GetAssetBySHA256(ctx, teamID, sum); err == nil {
		return a, false, nil
	} else if api.ErrorCode(err) != api.CodeNotFound {
		return api.Asset{}, false, err
	}
	a := api.Asset{ID: id.New("ast"), TeamID: teamID, Name: name, Size: size, SHA256: sum, CreatedAt: s.now()}
	err := s.store.CreateAsset(ctx, a)
	if api.ErrorCode(err) == api.CodeConflict {
		// The same bytes, sent at the same time: one row won.
		a, err = s.store.GetAssetBySHA256(ctx, teamID, sum)
		return a, false, err
	}
	if err != nil {
		return api.Asset{}, false, err
	}
	s.log.Info("asset created", "asset", a.ID, "team", teamID, "bytes", size)
	return a, true, nil
}

// GetAsset returns an asset of the team.
func (s *Server) GetAsset(ctx context.Context, teamID, assetID string) (api.Asset, error) {
	if err := scoped(teamID); err != nil {
		return api.Asset{}, err
	}
	if !id.HasPrefix(assetID, "ast") {
		return api.Asset{}, api.Errorf(api.CodeNotFound, "asset %q not found", assetID)
	}
	return s.store.GetAsset(ctx, teamID, assetID)
}

// ListAssets lists a page of the team's assets, oldest first.
func (s *Server) ListAssets(ctx context.Context, teamID string, p Page) (api.List[api.Asset], error) {
	if err := scoped(teamID); err != nil {
		return api.List[api.Asset]{}, err
	}
	limit, err := p.limit()
	if err != nil {
		return api.List[api.Asset]{}, err
	}
	items, err := s.store.ListAssets(ctx, teamID, p.Cursor, limit+1)
	if err != nil {
		return api.List[api.Asset]{}, err
	}
	return page(items, limit, func(a api.Asset) string { return a.ID }), nil
}

// OpenAsset returns an asset and its bytes; the reader fails at its end
// when the stored bytes no longer have the asset's digest.
func (s *Server) OpenAsset(ctx context.Context, teamID, assetID string) (api.Asset, io.ReadCloser, error) {
	a, err := s.GetAsset(ctx, teamID, assetID)
	if err != nil {
		return a, nil, err
	}
	if err := s.assetsConfigured(); err != nil {
		return a, nil, err
	}
	rc, err := s.blobs.Open(teamID, a.SHA256)
	return a, rc, err
}

// DeleteAsset removes an asset and its bytes. Sandboxes made from it keep
// their files.
func (s *Server) DeleteAsset(ctx context.Context, teamID, assetID string) error {
	a, err := s.GetAsset(ctx, teamID, assetID)
	if err != nil {
		return err
	}
	if err := s.assetsConfigured(); err != nil {
		return err
	}
	if err := s.store.DeleteAsset(ctx, teamID, a.ID); err != nil {
		return err
	}
	if err := s.blobs.Remove(teamID, a.SHA256); err != nil {
		// The row is gone: the bytes no longer count; the log says what
		// is left on disk.
		s.log.Error("remove asset bytes", "asset", a.ID, "err", err)
	}
	s.log.Info("asset deleted", "asset", a.ID, "team", teamID)
	return nil
}

// SaveAsset stores a folder of a running sandbox as an asset.
func (s *Server) SaveAsset(ctx context.Context, teamID, ref string, req api.SaveAssetRequest) (api.Asset, bool, error) {
	if err := s.assetsConfigured(); err != nil {
		return api.Asset{}, false, err
	}
	if req.Name != "" && !assetNameRE.MatchString(req.Name) {
		return api.Asset{}, false, invalid("asset name %q is invalid: use 1-128 letters, digits and '._-', starting with a letter or digit", req.Name)
	}
	sb, p, err := s.live(ctx, FileTarget{TeamID: teamID, Ref: ref, Wake: true}, "path", req.Path)
	if err != nil {
		return api.Asset{}, false, err
	}
	rc, err := s.node.ReadArchive(ctx, sb.ID, p)
	if err != nil {
		return api.Asset{}, false, err
	}
	defer rc.Close()
	return s.CreateAsset(ctx, teamID, AssetUpload{Name: req.Name}, rc)
}

// extractAsset extracts the sandbox's asset into its workdir, the bytes
// checked against the asset's digest on the way: damaged bytes extract
// nothing.
func (s *Server) extractAsset(ctx context.Context, sb *api.Sandbox) error {
	digest, err := s.landAsset(ctx, sb.TeamID, sb.ID, sb.Workdir, sb.Source.AssetID, s.defaultUser(*sb))
	if err != nil {
		return err
	}
	return s.updateProvision(ctx, sb, "", func(p *api.Provision) { p.Source.Digest = digest })
}

// landAsset extracts a team's asset into a folder of a started sandbox
// (or workload), owned by owner (the template's default user), and
// returns the asset's digest.
func (s *Server) landAsset(ctx context.Context, teamID, targetID, dir, assetID string, owner node.User) (string, error) {
	if err := s.assetsConfigured(); err != nil {
		return "", err
	}
	a, err := s.store.GetAsset(ctx, teamID, assetID)
	if err != nil {
		return "", err
	}
	rc, err := s.blobs.Open(teamID, a.SHA256)
	if err != nil {
		return "", err
	}
	defer rc.Close()
	if _, err := s.node.WriteArchive(ctx, targetID, node.ArchiveSpec{Path: dir, UID: owner.UID, GID: owner.GID}, rc); err != nil {
		return "", fmt.Errorf("extract asset %s: %w", a.ID, err)
	}
	return a.SHA256, nil
}

// checkAssetSource refuses, at create, an asset source whose asset the
// team does not have.
func (s *Server) checkAssetSource(ctx context.Context, teamID string, src *api.Source) error {
	if src == nil || src.Type != api.SourceAsset {
		return nil
	}
	if err := s.assetsConfigured(); err != nil {
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
