package server

import (
	"context"
	"crypto/sha256"
	"io"
	"math"
	"strconv"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/fspath"
	"github.com/cove-dev/cove/internal/node"
)

// FileTarget names the sandbox of a file call. Wake false refuses to wake
// an asleep sandbox (API.md "Files").
type FileTarget struct {
	TeamID string
	Ref    string
	Wake   bool
}

// live returns the running sandbox of a file call (waking it unless told
// not to) and the path checked and cleaned.
func (s *Server) live(ctx context.Context, t FileTarget, name, p string) (api.Sandbox, string, error) {
	clean, err := filePath(name, p)
	if err != nil {
		return api.Sandbox{}, "", err
	}
	sb, err := s.LiveSandbox(ctx, t.TeamID, t.Ref, t.Wake)
	if err != nil {
		return api.Sandbox{}, "", err
	}
	return sb, clean, nil
}

func filePath(name, p string) (string, error) {
	clean, err := fspath.Clean(p)
	if err != nil {
		return "", invalid("%s: %v", name, err)
	}
	return clean, nil
}

// checkIfMatch fails an If-Match that names something no file can have as
// its version, before the sandbox is woken for it: the precondition fails,
// as HTTP says. The node compares real versions.
func checkIfMatch(versions []string) error {
	for _, v := range versions {
		if v != "*" && !fspath.ValidVersion(v) {
			return api.Errorf(api.CodePreconditionFailed, "If-Match %q is not a version of this file; read it again, then retry", v)
		}
	}
	return nil
}

// fileOwner resolves the user files are written as: "user" (uid/gid 1000)
// when empty. explicit says the caller named one.
func fileOwner(user string) (uid, gid int, explicit bool, err error) {
	if user == "" {
		u := node.Users["user"]
		return u.UID, u.GID, false, nil
	}
	u, ok := node.Users[user]
	if !ok {
		return 0, 0, false, invalid("user %q is unknown; use user or root", user)
	}
	return u.UID, u.GID, true, nil
}

// StatFile describes one file (a symlink is itself).
func (s *Server) StatFile(ctx context.Context, t FileTarget, p string) (api.FileEntry, error) {
	sb, p, err := s.live(ctx, t, "path", p)
	if err != nil {
		return api.FileEntry{}, err
	}
	return s.node.StatFile(ctx, sb.ID, p)
}

// FileListQuery asks for a page of a directory listing.
type FileListQuery struct {
	Path   string
	Depth  int
	Limit  int
	Cursor string
}

// ListFiles lists the entries under a directory to a depth, a page at a
// time, in walk order (a directory before what is in it).
func (s *Server) ListFiles(ctx context.Context, t FileTarget, q FileListQuery) (api.List[api.FileEntry], error) {
	if q.Depth == 0 {
		q.Depth = 1
	}
	if q.Depth < 1 || q.Depth > fspath.MaxListDepth {
		return api.List[api.FileEntry]{}, invalid("depth must be from 1 to %d", fspath.MaxListDepth)
	}
	if q.Limit > fspath.MaxListLimit {
		q.Limit = fspath.MaxListLimit
	}
	if q.Cursor != "" {
		if _, err := filePath("cursor", q.Cursor); err != nil {
			return api.List[api.FileEntry]{}, err
		}
	}
	sb, p, err := s.live(ctx, t, "path", q.Path)
	if err != nil {
		return api.List[api.FileEntry]{}, err
	}
	return s.node.ListFiles(ctx, sb.ID, node.ListSpec{Path: p, Depth: q.Depth, Limit: q.Limit, After: q.Cursor})
}

// ReadFile opens a file's content, or the range and under the conditions
// req names; the answer says which status and headers to send.
func (s *Server) ReadFile(ctx context.Context, t FileTarget, req node.ReadSpec) (*node.Content, error) {
	sb, p, err := s.live(ctx, t, "path", req.Path)
	if err != nil {
		return nil, err
	}
	req.Path = p
	return s.node.ReadFile(ctx, sb.ID, req)
}

// WriteFileRequest is an upload.
type WriteFileRequest struct {
	Path string
	// User owns a new file ("user" when empty); named, it also becomes the
	// owner of an existing one, which otherwise keeps its owner.
	User string
	// Mode is octal permission bits ("0644"); empty keeps an existing
	// file's mode, 0644 for a new one.
	Mode        string
	IfMatch     []string // versions; "*" matches any existing file
	IfNoneMatch bool     // refuse when the file exists
	// SHA256 is the hex digest the bytes must have, when known before the
	// body; Trailer, when set, is called after the body and may return it.
	SHA256  string
	Trailer func() (string, error)
	Size    int64 // -1 when unknown
}

// WriteFile replaces a file's content with body, atomically. created says
// the file is new.
func (s *Server) WriteFile(ctx context.Context, t FileTarget, req WriteFileRequest, body io.Reader) (api.FileEntry, bool, error) {
	uid, gid, explicit, err := fileOwner(req.User)
	if err != nil {
		return api.FileEntry{}, false, err
	}
	mode := -1
	if req.Mode != "" {
		m, err := strconv.ParseUint(req.Mode, 8, 32)
		if err != nil || m > 0o7777 {
			return api.FileEntry{}, false, invalid("mode %q must be octal permission bits such as 0644", req.Mode)
		}
		mode = int(m)
	}
	if err := checkIfMatch(req.IfMatch); err != nil {
		return api.FileEntry{}, false, err
	}
	sb, p, err := s.live(ctx, t, "path", req.Path)
	if err != nil {
		return api.FileEntry{}, false, err
	}
	uid, gid = s.fileOwnerIn(sb, req.User, uid, gid)
	spec := node.WriteSpec{
		Path: p, UID: uid, GID: gid, Chown: explicit, Mode: mode,
		IfMatch: req.IfMatch, IfNoneMatch: req.IfNoneMatch, SHA256: req.SHA256,
		Trailer: req.Trailer, Size: req.Size,
	}
	return s.node.WriteFile(ctx, sb.ID, spec, body)
}

// EditFile replaces, in turn, each edit's old text by its new one; each
// must occur exactly once, else nothing is written.
func (s *Server) EditFile(ctx context.Context, t FileTarget, p string, ifMatch []string, req api.EditFileRequest) (api.FileEntry, error) {
	switch {
	case len(req.Edits) == 0:
		return api.FileEntry{}, invalid("edits is empty; give at least one {\"old\": …, \"new\": …}")
	case len(req.Edits) > fspath.MaxEdits:
		return api.FileEntry{}, invalid("%d edits; at most %d are allowed in one call", len(req.Edits), fspath.MaxEdits)
	}
	edits := make([]node.Edit, len(req.Edits))
	for i, e := range req.Edits {
		if e.Old == "" {
			return api.FileEntry{}, invalid("edits[%d].old is empty; give the exact text to replace", i)
		}
		edits[i] = node.Edit{Old: e.Old, New: e.New}
	}
	if err := checkIfMatch(ifMatch); err != nil {
		return api.FileEntry{}, err
	}
	sb, p, err := s.live(ctx, t, "path", p)
	if err != nil {
		return api.FileEntry{}, err
	}
	return s.node.EditFile(ctx, sb.ID, node.EditSpec{Path: p, IfMatch: ifMatch, Edits: edits})
}

// Mkdir creates a directory and its missing parents, owned by user.
func (s *Server) Mkdir(ctx context.Context, t FileTarget, req api.MkdirRequest, user string) (api.FileEntry, error) {
	uid, gid, _, err := fileOwner(user)
	if err != nil {
		return api.FileEntry{}, err
	}
	sb, p, err := s.live(ctx, t, "path", req.Path)
	if err != nil {
		return api.FileEntry{}, err
	}
	uid, gid = s.fileOwnerIn(sb, user, uid, gid)
	return s.node.Mkdir(ctx, sb.ID, node.MkdirSpec{Path: p, UID: uid, GID: gid})
}

// MoveFile renames a file or directory; missing parents of the
// destination are created, owned by user.
func (s *Server) MoveFile(ctx context.Context, t FileTarget, req api.MoveRequest, user string) (api.FileEntry, error) {
	uid, gid, _, err := fileOwner(user)
	if err != nil {
		return api.FileEntry{}, err
	}
	to, err := filePath("to", req.To)
	if err != nil {
		return api.FileEntry{}, err
	}
	sb, from, err := s.live(ctx, t, "from", req.From)
	if err != nil {
		return api.FileEntry{}, err
	}
	uid, gid = s.fileOwnerIn(sb, user, uid, gid)
	return s.node.MoveFile(ctx, sb.ID, node.MoveSpec{From: from, To: to, Overwrite: req.Overwrite, UID: uid, GID: gid})
}

// RemoveFile removes a file, symlink or empty directory; with recursive, a
// directory and all in it.
func (s *Server) RemoveFile(ctx context.Context, t FileTarget, p string, recursive bool) error {
	sb, p, err := s.live(ctx, t, "path", p)
	if err != nil {
		return err
	}
	return s.node.RemoveFile(ctx, sb.ID, p, recursive)
}

// ReadArchive opens a folder as a tar.gz stream; a stream cut short means
// it failed midway.
func (s *Server) ReadArchive(ctx context.Context, t FileTarget, p string) (io.ReadCloser, error) {
	sb, p, err := s.live(ctx, t, "path", p)
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
func (s *Server) WriteArchive(ctx context.Context, t FileTarget, req ArchiveUpload, body io.Reader) (api.ArchiveResult, error) {
	uid, gid, _, err := fileOwner(req.User)
	if err != nil {
		return api.ArchiveResult{}, err
	}
	if sb, err := s.activeSandbox(ctx, t.TeamID, t.Ref); err == nil && sb.State == api.StateCreating &&
		sb.Source != nil && sb.Source.Type == api.SourceUpload && sb.Source.Digest == "" {
		return s.deliverUpload(ctx, sb, req, body)
	}
	sb, p, err := s.live(ctx, t, "path", req.Path)
	if err != nil {
		return api.ArchiveResult{}, err
	}
	uid, gid = s.fileOwnerIn(sb, req.User, uid, gid)
	cr := &checkedReader{r: body, h: sha256.New(), max: math.MaxInt64, want: req.SHA256, trailer: req.Trailer}
	res, err := s.node.WriteArchive(ctx, sb.ID, node.ArchiveSpec{Path: p, UID: uid, GID: gid}, cr)
	if cr.err != nil {
		return api.ArchiveResult{}, cr.err
	}
	return res, err
}
