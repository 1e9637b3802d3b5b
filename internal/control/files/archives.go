package files

import (
	"context"
	"io"
	"math"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/uploads"
	"github.com/cove-dev/cove/internal/node"
)

// ArchiveUpload is a PUT …/files/archive.
type ArchiveUpload struct {
	Path string // "" for a sandbox's source upload: its workdir
	User string
	// SHA256 is the hex digest the archive's bytes must have, when known
	// before the body; Trailer, when set, returns it after the body.
	SHA256  string
	Trailer func() (string, error)
	Size    int64
}

// ReadArchive opens a folder as a tar.gz stream; a stream cut short means
// it failed midway.
func (s *Service) ReadArchive(ctx context.Context, t Target, p string) (io.ReadCloser, error) {
	sb, p, err := s.Live(ctx, t, "path", p)
	if err != nil {
		return nil, err
	}
	return s.node.ReadArchive(ctx, sb.ID, p)
}

// WriteArchive extracts a tar or tar.gz into a folder, owned by user. An
// entry that would leave the folder fails the whole archive before
// anything is written to the folder. A sandbox created with source upload
// takes its source this way while it is creating: the archive lands in
// its workdir, and then its setup runs.
func (s *Service) WriteArchive(ctx context.Context, t Target, req ArchiveUpload, body io.Reader) (api.ArchiveResult, error) {
	uid, gid, _, err := fileOwner(req.User)
	if err != nil {
		return api.ArchiveResult{}, err
	}
	if sb, err := s.sandboxes.ActiveSandbox(ctx, t.TeamID, t.Ref); err == nil && awaitsUpload(sb) {
		return s.sandboxes.DeliverUpload(ctx, sb, req, body)
	}
	sb, p, err := s.Live(ctx, t, "path", req.Path)
	if err != nil {
		return api.ArchiveResult{}, err
	}
	uid, gid = s.ownerIn(sb, req.User, uid, gid)
	cr := uploads.NewCheckedReader(body, math.MaxInt64, req.SHA256, req.Trailer)
	res, err := s.node.WriteArchive(ctx, sb.ID, node.ArchiveSpec{Path: p, UID: uid, GID: gid}, cr)
	if cr.Err() != nil {
		return api.ArchiveResult{}, cr.Err()
	}
	return res, err
}

// awaitsUpload says sb is creating and waits for its source upload.
func awaitsUpload(sb api.Sandbox) bool {
	return sb.State == api.StateCreating && sb.Source != nil && sb.Source.Type == api.SourceUpload && sb.Source.Digest == ""
}
