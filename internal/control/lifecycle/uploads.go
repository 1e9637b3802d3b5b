package lifecycle

import (
	"context"
	"io"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/files"
	"github.com/cove-dev/cove/internal/control/uploads"
	"github.com/cove-dev/cove/internal/node"
	"github.com/cove-dev/cove/internal/sources"
)

// A sandbox created with source upload awaits its folder: the upload
// (PUT …/files/archive) is received whole into a private file, counted in
// the team's open uploads, then handed to the sandbox's start, which
// extracts it into the workdir.

// spoolUpload receives an upload whole into a private temporary file,
// counted in the team's open uploads of kind k (nil: the source uploads,
// bounded by MaxSourceBytes); done removes the file and ends the upload.
func (s *Core) spoolUpload(ctx context.Context, teamID string, k uploads.Kind, r io.Reader, max int64, want string, trailer func() (string, error), what string) (_ *uploads.Spooled, done func(), _ error) {
	u, err := s.svc.Uploads.Begin(teamID, k)
	if err != nil {
		return nil, nil, err
	}
	sp, err := s.svc.Uploads.Spool(ctx, u, r, max, want, trailer, what)
	if err != nil {
		u.End()
		return nil, nil, err
	}
	return sp, func() { sp.Close(); u.End() }, nil
}

// uploadReq is a PUT …/files/archive handed to the start of a sandbox
// that awaits its source upload.
type uploadReq struct {
	ctx     context.Context // the request's: the body is its
	body    io.Reader
	sha256  string                 // hex, from a header; "" when none
	trailer func() (string, error) // a digest that comes after the body
	size    int64                  // Content-Length, -1 when unknown
	result  chan uploadResult      // buffered; answered exactly once
}

type uploadResult struct {
	res api.ArchiveResult
	err error
}

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

// deliverUpload hands an upload to the start of a sandbox that awaits its
// source, and returns what came of it.
func (s *Core) deliverUpload(ctx context.Context, sb api.Sandbox, req ArchiveUpload, body io.Reader) (api.ArchiveResult, error) {
	if req.Path != "" {
		p, err := files.Path("path", req.Path)
		if err != nil {
			return api.ArchiveResult{}, err
		}
		if p != sb.Workdir {
			return api.ArchiveResult{}, invalid("sandbox %s awaits its source upload into its workdir %s; leave path out or name the workdir", sb.ID, sb.Workdir)
		}
	}
	if req.User != "" && req.User != "user" {
		return api.ArchiveResult{}, invalid("a source upload belongs to user; leave user out")
	}
	if req.Size > s.cfg.MaxSourceBytes {
		return api.ArchiveResult{}, uploads.TooLarge(req.Size, s.cfg.MaxSourceBytes)
	}
	o := s.opsFor(sb.ID)
	o.mu.Lock()
	ch, closed := o.upload, o.uploadClosed
	o.mu.Unlock()
	if ch == nil {
		return api.ArchiveResult{}, api.Errorf(api.CodeConflict, "sandbox %s is %s and awaits no upload", sb.ID, sb.State)
	}
	// The archive arrives into a private file first, at the sender's
	// pace; the sandbox's start takes it only once it is whole and
	// checked.
	sp, done, err := s.spoolUpload(ctx, sb.TeamID, nil, body, s.cfg.MaxSourceBytes, req.SHA256, req.Trailer, "source upload")
	if err != nil {
		return api.ArchiveResult{}, err
	}
	defer done()
	if err := sources.CheckExpansion(sp.File); err != nil {
		return api.ArchiveResult{}, err
	}
	if _, err := sp.File.Seek(0, io.SeekStart); err != nil {
		return api.ArchiveResult{}, err
	}
	u := &uploadReq{ctx: ctx, body: sp.File, sha256: sp.SHA256, size: sp.Size, result: make(chan uploadResult, 1)}
	select {
	case ch <- u:
	case <-closed:
		return api.ArchiveResult{}, api.Errorf(api.CodeConflict, "sandbox %s no longer awaits its source upload", sb.ID)
	case <-ctx.Done():
		return api.ArchiveResult{}, ctx.Err()
	}
	r := <-u.result
	return r.res, r.err
}

// awaitUpload waits for the sandbox's source upload and extracts it into
// the workdir. A refused upload (bad archive, digest, size) answers its
// sender and the wait goes on; the sandbox fails when none lands within
// UploadTimeout.
func (s *Core) awaitUpload(ctx context.Context, sb *api.Sandbox, ch chan *uploadReq) error {
	if err := s.updateProvision(ctx, sb, "waiting for the source upload: PUT /v1/sandboxes/"+sb.ID+"/files/archive", nil); err != nil {
		return err
	}
	timer := time.NewTimer(s.cfg.UploadTimeout)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C:
			return api.Errorf(api.CodeUnprocessable, "no source upload landed within %s of the create", s.cfg.UploadTimeout)
		case u := <-ch:
			res, digest, err := s.receiveUpload(ctx, sb, u)
			if err == nil {
				err = s.updateProvision(ctx, sb, "", func(p *api.Provision) { p.Source.Digest = digest })
			}
			u.result <- uploadResult{res, err}
			if err == nil {
				return nil
			}
			s.log.Info("source upload refused", "sandbox", sb.ID, "err", err)
		}
	}
}

func (s *Core) receiveUpload(ctx context.Context, sb *api.Sandbox, u *uploadReq) (api.ArchiveResult, string, error) {
	uctx, cancel := context.WithCancel(u.ctx)
	defer cancel()
	stop := context.AfterFunc(ctx, cancel)
	defer stop()
	cr := uploads.NewCheckedReader(u.body, s.cfg.MaxSourceBytes, u.sha256, u.trailer)
	owner := s.svc.Images.DefaultUser(*sb)
	res, err := s.node.WriteArchive(uctx, sb.ID, node.ArchiveSpec{Path: sb.Workdir, UID: owner.UID, GID: owner.GID}, cr)
	if cr.Err() != nil {
		// The archive was refused at its end: the agent extracted nothing.
		return api.ArchiveResult{}, "", cr.Err()
	}
	if err != nil {
		return api.ArchiveResult{}, "", err
	}
	if !cr.Done() {
		return api.ArchiveResult{}, "", api.Errorf(api.CodeInvalidArgument, "the archive ended before its body did; send the archive alone")
	}
	res.Path = sb.Workdir
	return res, cr.Sum(), nil
}
