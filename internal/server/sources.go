package server

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/assets"
	"github.com/cove-dev/cove/internal/control/files"
	"github.com/cove-dev/cove/internal/control/uploads"
	"github.com/cove-dev/cove/internal/node"
)

// The file calls, assets and the upload ledger are services of their own
// (internal/control/files, assets, uploads). This file builds them over
// the core and keeps the small delegations through which the core's other
// files still reach them.

func (s *Server) newSourceServices() {
	nd := coreNode{s}
	s.uploads = uploads.New(uploads.Config{MaxPerTeam: s.cfg.MaxUploadsPerTeam, Dir: s.cfg.UploadDir}, nd)
	s.files = files.New(nd, coreSandboxes{s})
	s.assets = assets.New(assets.Config{MaxBytes: s.cfg.MaxSourceBytes, MaxTeamBytes: s.cfg.MaxTeamAssetBytes},
		s.store, nd, coreSandboxes{s}, s.uploads, s.now, s.log)
}

// Files serves a sandbox's file calls and archives.
func (s *Server) Files() *files.Service { return s.files }

// Assets serves the team's assets.
func (s *Server) Assets() *assets.Service { return s.assets }

// AssetBlobs keeps assets' bytes (assets.Blobs).
type AssetBlobs = assets.Blobs

// SetAssetBlobs connects the asset store; without one, asset calls and
// asset sources answer 422.
func (s *Server) SetAssetBlobs(b AssetBlobs) { s.assets.SetBlobs(b) }

// coreNode is the node as SetNode connects it, read at each call: the
// services are built in New, before the node is set.
type coreNode struct{ s *Server }

func (n coreNode) StatFile(ctx context.Context, sandboxID, path string) (api.FileEntry, error) {
	return n.s.node.StatFile(ctx, sandboxID, path)
}

func (n coreNode) ListFiles(ctx context.Context, sandboxID string, spec node.ListSpec) (api.List[api.FileEntry], error) {
	return n.s.node.ListFiles(ctx, sandboxID, spec)
}

func (n coreNode) ReadFile(ctx context.Context, sandboxID string, spec node.ReadSpec) (*node.Content, error) {
	return n.s.node.ReadFile(ctx, sandboxID, spec)
}

func (n coreNode) WriteFile(ctx context.Context, sandboxID string, spec node.WriteSpec, body io.Reader) (api.FileEntry, bool, error) {
	return n.s.node.WriteFile(ctx, sandboxID, spec, body)
}

func (n coreNode) EditFile(ctx context.Context, sandboxID string, spec node.EditSpec) (api.FileEntry, error) {
	return n.s.node.EditFile(ctx, sandboxID, spec)
}

func (n coreNode) Mkdir(ctx context.Context, sandboxID string, spec node.MkdirSpec) (api.FileEntry, error) {
	return n.s.node.Mkdir(ctx, sandboxID, spec)
}

func (n coreNode) MoveFile(ctx context.Context, sandboxID string, spec node.MoveSpec) (api.FileEntry, error) {
	return n.s.node.MoveFile(ctx, sandboxID, spec)
}

func (n coreNode) RemoveFile(ctx context.Context, sandboxID, path string, recursive bool) error {
	return n.s.node.RemoveFile(ctx, sandboxID, path, recursive)
}

func (n coreNode) ReadArchive(ctx context.Context, sandboxID, path string) (io.ReadCloser, error) {
	return n.s.node.ReadArchive(ctx, sandboxID, path)
}

func (n coreNode) WriteArchive(ctx context.Context, sandboxID string, spec node.ArchiveSpec, body io.Reader) (api.ArchiveResult, error) {
	return n.s.node.WriteArchive(ctx, sandboxID, spec, body)
}

// HoldDisk counts an upload's bytes on a node that counts them
// (internal/node/local); other nodes hold nothing.
func (n coreNode) HoldDisk(key string, bytes int64) error {
	if h, ok := n.s.node.(uploads.DiskHolder); ok {
		return h.HoldDisk(key, bytes)
	}
	return nil
}

// coreSandboxes is what the file and asset services ask of the core.
type coreSandboxes struct{ s *Server }

func (c coreSandboxes) LiveSandbox(ctx context.Context, teamID, ref string, wake bool) (api.Sandbox, error) {
	return c.s.LiveSandbox(ctx, teamID, ref, wake)
}

func (c coreSandboxes) ActiveSandbox(ctx context.Context, teamID, ref string) (api.Sandbox, error) {
	return c.s.activeSandbox(ctx, teamID, ref)
}

func (c coreSandboxes) DeliverUpload(ctx context.Context, sb api.Sandbox, req files.ArchiveUpload, body io.Reader) (api.ArchiveResult, error) {
	return c.s.deliverUpload(ctx, sb, ArchiveUpload(req), body)
}

func (c coreSandboxes) DefaultUser(sb api.Sandbox) node.User { return c.s.defaultUser(sb) }

// The file calls, as the core's tests make them.
type (
	FileTarget       = files.Target
	FileListQuery    = files.ListQuery
	WriteFileRequest = files.WriteRequest
	AssetUpload      = assets.Upload
)

func (s *Server) StatFile(ctx context.Context, t FileTarget, p string) (api.FileEntry, error) {
	return s.files.StatFile(ctx, t, p)
}

func (s *Server) ListFiles(ctx context.Context, t FileTarget, q FileListQuery) (api.List[api.FileEntry], error) {
	return s.files.ListFiles(ctx, t, q)
}

func (s *Server) WriteFile(ctx context.Context, t FileTarget, req WriteFileRequest, body io.Reader) (api.FileEntry, bool, error) {
	return s.files.WriteFile(ctx, t, req, body)
}

func (s *Server) ReadFile(ctx context.Context, t FileTarget, req node.ReadSpec) (*node.Content, error) {
	return s.files.ReadFile(ctx, t, req)
}

func (s *Server) EditFile(ctx context.Context, t FileTarget, p string, ifMatch []string, req api.EditFileRequest) (api.FileEntry, error) {
	return s.files.EditFile(ctx, t, p, ifMatch, req)
}

func (s *Server) Mkdir(ctx context.Context, t FileTarget, req api.MkdirRequest, user string) (api.FileEntry, error) {
	return s.files.Mkdir(ctx, t, req, user)
}

func (s *Server) MoveFile(ctx context.Context, t FileTarget, req api.MoveRequest, user string) (api.FileEntry, error) {
	return s.files.MoveFile(ctx, t, req, user)
}

func (s *Server) RemoveFile(ctx context.Context, t FileTarget, p string, recursive bool) error {
	return s.files.RemoveFile(ctx, t, p, recursive)
}

func (s *Server) ReadArchive(ctx context.Context, t FileTarget, p string) (io.ReadCloser, error) {
	return s.files.ReadArchive(ctx, t, p)
}

func (s *Server) WriteArchive(ctx context.Context, t FileTarget, req ArchiveUpload, body io.Reader) (api.ArchiveResult, error) {
	return s.files.WriteArchive(ctx, t, files.ArchiveUpload(req), body)
}

func filePath(name, p string) (string, error) { return files.Path(name, p) }

// extractAsset extracts the sandbox's asset into its workdir and records
// its digest.
func (s *Server) extractAsset(ctx context.Context, sb *api.Sandbox) error {
	digest, err := s.landAsset(ctx, sb.TeamID, sb.ID, sb.Workdir, sb.Source.AssetID, s.defaultUser(*sb))
	if err != nil {
		return err
	}
	return s.updateProvision(ctx, sb, "", func(p *api.Provision) { p.Source.Digest = digest })
}

func (s *Server) landAsset(ctx context.Context, teamID, targetID, dir, assetID string, owner node.User) (string, error) {
	return s.assets.Land(ctx, teamID, targetID, dir, assetID, owner)
}

func (s *Server) checkAssetSource(ctx context.Context, teamID string, src *api.Source) error {
	return s.assets.CheckSource(ctx, teamID, src)
}

// uploadKind says which of the team's caps an upload's bytes count
// against.
type uploadKind int

const (
	uploadSource uploadKind = iota // no team cap: bounded by MaxSourceBytes
	uploadAsset
	uploadImage
)

func (s *Server) uploadKind(k uploadKind) uploads.Kind {
	switch k {
	case uploadAsset:
		return s.assets.Kind()
	case uploadImage:
		return imageUploads{s}
	}
	return nil
}

// imageUploads counts image uploads against the team's image bytes.
type imageUploads struct{ s *Server }

func (k imageUploads) Cap() int64 { return k.s.cfg.MaxImageBytesPerTeam }

func (k imageUploads) Stored(ctx context.Context, teamID string) (int64, error) {
	return k.s.teamImageBytes(ctx, teamID)
}

func (k imageUploads) Full(used, limit int64) error {
	return &api.Error{
		Code: api.CodeInsufficientStorage,
		Message: fmt.Sprintf("the team's images and image uploads use %d of its %d bytes; delete images (DELETE /v1/images/{id}) to make room; nothing was kept",
			used, limit),
		Details: map[string]any{"used_bytes": used, "limit_bytes": limit},
	}
}

type upload struct{ *uploads.Upload }

func (u *upload) end() { u.End() }

func (s *Server) beginUpload(teamID string, k uploadKind) (*upload, error) {
	u, err := s.uploads.Begin(teamID, s.uploadKind(k))
	if err != nil {
		return nil, err
	}
	return &upload{u}, nil
}

// spooled is an upload received whole into a private temporary file.
type spooled struct {
	f    *os.File
	size int64
	sum  string
	sp   *uploads.Spooled
}

// Close removes the file.
func (sp *spooled) Close() error { return sp.sp.Close() }

func (s *Server) spool(ctx context.Context, u *upload, r io.Reader, max int64, want string, trailer func() (string, error), what string) (*spooled, error) {
	sp, err := s.uploads.Spool(ctx, u.Upload, r, max, want, trailer, what)
	if err != nil {
		return nil, err
	}
	return &spooled{f: sp.File, size: sp.Size, sum: sp.SHA256, sp: sp}, nil
}
