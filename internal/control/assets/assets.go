// Package assets is the control plane's store of the archives sandboxes
// start from: a team's assets (stored once per digest, under the team's
// byte cap, counted while their bytes arrive), a folder of a sandbox saved
// as one, and what a sandbox or workload created from an asset extracts.
// The bytes themselves are kept by AssetBlobs (internal/sources.Blobs).
package assets

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"regexp"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/files"
	"github.com/cove-dev/cove/internal/control/uploads"
	"github.com/cove-dev/cove/internal/id"
	"github.com/cove-dev/cove/internal/node"
)

// Blobs keeps assets' bytes, content-addressed per team
// (internal/sources.Blobs on the node's disk; a bucket in a fleet).
type Blobs interface {
	// Put stores at most max bytes of r for the team and returns their
	// sha-256 (hex) and size; it refuses what is not a tar or tar.gz whose
	// entries stay in their folder. Nothing is kept on failure.
	Put(ctx context.Context, teamID string, r io.Reader, max int64, want string) (sum string, size int64, err error)
	// Open reads the bytes back; the reader fails at its end when they
	// are no longer those of sum.
	Open(ctx context.Context, teamID, sum string) (io.ReadCloser, error)
	Remove(ctx context.Context, teamID, sum string) error
}

// Store is the part of the store assets keep their rows in.
type Store interface {
	// CreateAsset answers CodeConflict for a second row of the team with
	// the same SHA256.
	CreateAsset(ctx context.Context, a api.Asset) error
	GetAsset(ctx context.Context, teamID, id string) (api.Asset, error)
	GetAssetBySHA256(ctx context.Context, teamID, sha256 string) (api.Asset, error)
	ListAssets(ctx context.Context, teamID, after string, limit int) ([]api.Asset, error)
	DeleteAsset(ctx context.Context, teamID, id string) error
	AssetBytes(ctx context.Context, teamID string) (int64, error)
}

// Node is the node's part assets use: a folder read as an archive, an
// archive extracted into a folder.
type Node interface {
	ReadArchive(ctx context.Context, sandboxID, path string) (io.ReadCloser, error)
	WriteArchive(ctx context.Context, sandboxID string, spec node.ArchiveSpec, body io.Reader) (api.ArchiveResult, error)
}

// Sandboxes finds the running sandbox a folder is saved from.
type Sandboxes interface {
	// LiveSandbox returns a running sandbox of the team, woken first
	// unless wake is false.
	LiveSandbox(ctx context.Context, teamID, ref string, wake bool) (api.Sandbox, error)
}

// Config bounds assets.
type Config struct {
	// MaxBytes bounds one asset (the server's --max-source-bytes).
	MaxBytes int64
	// MaxTeamBytes bounds all of a team's assets; 0 is no bound.
	MaxTeamBytes int64
}

// Service serves the asset calls.
type Service struct {
	cfg       Config
	store     Store
	node      Node
	sandboxes Sandboxes
	uploads   *uploads.Ledger
	log       *slog.Logger
	now       func() time.Time
	// blobs is set before serving (SetBlobs), then only read; nil: assets
	// are not configured.
	blobs Blobs
}

// New returns the asset calls. now is the clock of CreatedAt.
func New(cfg Config, st Store, nd Node, sbs Sandboxes, ul *uploads.Ledger, now func() time.Time, log *slog.Logger) *Service {
	return &Service{cfg: cfg, store: st, node: nd, sandboxes: sbs, uploads: ul, now: now, log: log}
}

// SetBlobs connects the asset store; without one, asset calls and asset
// sources answer 422.
func (s *Service) SetBlobs(b Blobs) { s.blobs = b }

func (s *Service) configured() error {
	if s.blobs == nil {
		return api.Errorf(api.CodeUnprocessable, "assets are not configured on this server")
	}
	return nil
}

// Kind is the upload kind of assets' bytes: they count against the
// team's asset cap.
func (s *Service) Kind() uploads.Kind { return kind{s} }

type kind struct{ s *Service }

func (k kind) Cap() int64 { return k.s.cfg.MaxTeamBytes }

func (k kind) Stored(ctx context.Context, teamID string) (int64, error) {
	return k.s.store.AssetBytes(ctx, teamID)
}

func (k kind) Full(used, limit int64) error { return StorageFull(used, limit) }

// StorageFull is the error of an asset that does not fit the team's cap.
func StorageFull(used, limit int64) error {
	return &api.Error{
		Code: api.CodeInsufficientStorage,
		Message: fmt.Sprintf("the team's assets use %d of its %d bytes; delete assets (DELETE /v1/assets/{id}) to make room",
			used, limit),
		Details: map[string]any{"used_bytes": used, "limit_bytes": limit},
	}
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

func checkName(name string) error {
	if name != "" && !nameRE.MatchString(name) {
		return api.Errorf(api.CodeInvalidArgument, "asset name %q is invalid: use 1-128 letters, digits and '._-', starting with a letter or digit", name)
	}
	return nil
}

// scoped refuses a call that names no team: the store reads an empty team
// as every team.
func scoped(teamID string) error {
	if teamID == "" {
		return api.Errorf(api.CodeInternal, "a team-scoped call was made without a team")
	}
	return nil
}

// Upload is a POST /v1/assets.
type Upload struct {
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
func (s *Service) CreateAsset(ctx context.Context, teamID string, req Upload, body io.Reader) (api.Asset, bool, error) {
	if err := scoped(teamID); err != nil {
		return api.Asset{}, false, err
	}
	if err := s.configured(); err != nil {
		return api.Asset{}, false, err
	}
	if err := checkName(req.Name); err != nil {
		return api.Asset{}, false, err
	}
	// The team's cap is checked as the bytes arrive (u), together with
	// its other uploads in flight, not once before: parallel uploads
	// cannot each pass it.
	u, err := s.uploads.Begin(teamID, s.Kind())
	if err != nil {
		return api.Asset{}, false, err
	}
	defer u.End()
	if req.Size > 0 {
		if err := u.Reserve(ctx, req.Size); err != nil {
			return api.Asset{}, false, err
		}
	}
	cr := uploads.NewCheckedReader(u.Reader(ctx, body), math.MaxInt64, req.SHA256, req.Trailer)
	sum, size, err := s.blobs.Put(ctx, teamID, cr, s.cfg.MaxBytes, "")
	if cr.Err() != nil {
		return api.Asset{}, false, cr.Err()
	}
	if err != nil {
		return api.Asset{}, false, err
	}
	return s.record(ctx, teamID, req.Name, sum, size)
}

// record stores the row of bytes that are in the blob store, or answers
// the asset that has them already.
func (s *Service) record(ctx context.Context, teamID, name, sum string, size int64) (api.Asset, bool, error) {
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
func (s *Service) GetAsset(ctx context.Context, teamID, assetID string) (api.Asset, error) {
	if err := scoped(teamID); err != nil {
		return api.Asset{}, err
	}
	if !id.HasPrefix(assetID, "ast") {
		return api.Asset{}, api.Errorf(api.CodeNotFound, "asset %q not found", assetID)
	}
	return s.store.GetAsset(ctx, teamID, assetID)
}

// Page sizes of the list of assets.
const (
	DefaultPageLimit = 100
	MaxPageLimit     = 1000
)

// ListAssets lists a page of the team's assets, oldest first: at most
// limit (0: DefaultPageLimit) after cursor, the last ID of the page
// before.
func (s *Service) ListAssets(ctx context.Context, teamID, cursor string, limit int) (api.List[api.Asset], error) {
	if err := scoped(teamID); err != nil {
		return api.List[api.Asset]{}, err
	}
	switch {
	case limit == 0:
		limit = DefaultPageLimit
	case limit < 0 || limit > MaxPageLimit:
		return api.List[api.Asset]{}, api.Errorf(api.CodeInvalidArgument, "limit must be a number from 1 to %d", MaxPageLimit)
	}
	items, err := s.store.ListAssets(ctx, teamID, cursor, limit+1)
	if err != nil {
		return api.List[api.Asset]{}, err
	}
	out := api.List[api.Asset]{Items: items}
	if out.Items == nil {
		out.Items = []api.Asset{}
	}
	if len(items) > limit {
		out.Items = items[:limit]
		out.NextCursor = items[limit-1].ID
	}
	return out, nil
}

// OpenAsset returns an asset and its bytes; the reader fails at its end
// when the stored bytes no longer have the asset's digest.
func (s *Service) OpenAsset(ctx context.Context, teamID, assetID string) (api.Asset, io.ReadCloser, error) {
	a, err := s.GetAsset(ctx, teamID, assetID)
	if err != nil {
		return a, nil, err
	}
	if err := s.configured(); err != nil {
		return a, nil, err
	}
	rc, err := s.blobs.Open(ctx, teamID, a.SHA256)
	return a, rc, err
}

// DeleteAsset removes an asset and its bytes. Sandboxes made from it keep
// their files.
func (s *Service) DeleteAsset(ctx context.Context, teamID, assetID string) error {
	a, err := s.GetAsset(ctx, teamID, assetID)
	if err != nil {
		return err
	}
	if err := s.configured(); err != nil {
		return err
	}
	if err := s.store.DeleteAsset(ctx, teamID, a.ID); err != nil {
		return err
	}
	if err := s.blobs.Remove(ctx, teamID, a.SHA256); err != nil {
		// The row is gone: the bytes no longer count; the log says what
		// is left on disk.
		s.log.Error("remove asset bytes", "asset", a.ID, "err", err)
	}
	s.log.Info("asset deleted", "asset", a.ID, "team", teamID)
	return nil
}

// SaveAsset stores a folder of a running sandbox as an asset.
func (s *Service) SaveAsset(ctx context.Context, teamID, ref string, req api.SaveAssetRequest) (api.Asset, bool, error) {
	if err := s.configured(); err != nil {
		return api.Asset{}, false, err
	}
	if err := checkName(req.Name); err != nil {
		return api.Asset{}, false, err
	}
	p, err := files.Path("path", req.Path)
	if err != nil {
		return api.Asset{}, false, err
	}
	sb, err := s.sandboxes.LiveSandbox(ctx, teamID, ref, true)
	if err != nil {
		return api.Asset{}, false, err
	}
	rc, err := s.node.ReadArchive(ctx, sb.ID, p)
	if err != nil {
		return api.Asset{}, false, err
	}
	defer rc.Close()
	return s.CreateAsset(ctx, teamID, Upload{Name: req.Name}, rc)
}
