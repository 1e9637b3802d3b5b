// Package files is the control plane's side of a sandbox's files: the
// file calls (stat, list, read, write, edit, mkdir, move, remove) and
// folder archives, over the node's file calls, on the live sandbox the
// lifecycle core finds (waking it unless told not to). Paths are checked
// and cleaned here, before any sandbox is woken for them.
package files

import (
	"context"
	"io"
	"strconv"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/fspath"
	"github.com/cove-dev/cove/internal/node"
)

// Node is the node's part that file calls use (internal/node/local; a
// fake in tests).
type Node interface {
	StatFile(ctx context.Context, sandboxID, path string) (api.FileEntry, error)
	ListFiles(ctx context.Context, sandboxID string, spec node.ListSpec) (api.List[api.FileEntry], error)
	ReadFile(ctx context.Context, sandboxID string, spec node.ReadSpec) (*node.Content, error)
	WriteFile(ctx context.Context, sandboxID string, spec node.WriteSpec, body io.Reader) (entry api.FileEntry, created bool, err error)
	EditFile(ctx context.Context, sandboxID string, spec node.EditSpec) (api.FileEntry, error)
	Mkdir(ctx context.Context, sandboxID string, spec node.MkdirSpec) (api.FileEntry, error)
	MoveFile(ctx context.Context, sandboxID string, spec node.MoveSpec) (api.FileEntry, error)
	RemoveFile(ctx context.Context, sandboxID, path string, recursive bool) error
	ReadArchive(ctx context.Context, sandboxID, path string) (io.ReadCloser, error)
	WriteArchive(ctx context.Context, sandboxID string, spec node.ArchiveSpec, body io.Reader) (api.ArchiveResult, error)
	node.Watches
}

// Sandboxes is what file calls ask of the lifecycle core.
type Sandboxes interface {
	// LiveSandbox returns a running sandbox of the team, woken first
	// unless wake is false (a conflict then says why).
	LiveSandbox(ctx context.Context, teamID, ref string, wake bool) (api.Sandbox, error)
	// ActiveSandbox reads a sandbox of the team, counting the call as
	// activity for its idle timeout.
	ActiveSandbox(ctx context.Context, teamID, ref string) (api.Sandbox, error)
	// DeliverUpload hands an archive to the start of a creating sandbox
	// that awaits its source upload and returns what came of it.
	DeliverUpload(ctx context.Context, sb api.Sandbox, req ArchiveUpload, body io.Reader) (api.ArchiveResult, error)
	// DefaultUser is the account of a sandbox's default user ("user", or
	// an imported image's own).
	DefaultUser(sb api.Sandbox) node.User
}

// Service serves the file calls.
type Service struct {
	node      Node
	sandboxes Sandboxes
}

// New returns the file calls over nd, on the sandboxes sbs finds.
func New(nd Node, sbs Sandboxes) *Service {
	return &Service{node: nd, sandboxes: sbs}
}

// Target names the sandbox of a file call. Wake false refuses to wake an
// asleep sandbox (API.md "Files").
type Target struct {
	TeamID string
	Ref    string
	Wake   bool
}

// Live returns the running sandbox of a file call (waking it unless told
// not to) and the path p, named name in errors, checked and cleaned.
func (s *Service) Live(ctx context.Context, t Target, name, p string) (api.Sandbox, string, error) {
	clean, err := Path(name, p)
	if err != nil {
		return api.Sandbox{}, "", err
	}
	sb, err := s.sandboxes.LiveSandbox(ctx, t.TeamID, t.Ref, t.Wake)
	if err != nil {
		return api.Sandbox{}, "", err
	}
	return sb, clean, nil
}

// Path checks and cleans a path of a sandbox; name names it in errors.
func Path(name, p string) (string, error) {
	clean, err := fspath.Clean(p)
	if err != nil {
		return "", invalid("%s: %v", name, err)
	}
	return clean, nil
}

func invalid(format string, args ...any) error {
	return api.Errorf(api.CodeInvalidArgument, format, args...)
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

// ownerIn is fileOwner in sandbox sb: the default user ("" or "user") of
// an imported image's sandbox is the image's user.
func (s *Service) ownerIn(sb api.Sandbox, user string, uid, gid int) (int, int) {
	if user == "" || user == "user" {
		u := s.sandboxes.DefaultUser(sb)
		return u.UID, u.GID
	}
	return uid, gid
}

// StatFile describes one file (a symlink is itself).
func (s *Service) StatFile(ctx context.Context, t Target, p string) (api.FileEntry, error) {
	sb, p, err := s.Live(ctx, t, "path", p)
	if err != nil {
		return api.FileEntry{}, err
	}
	return s.node.StatFile(ctx, sb.ID, p)
}

// ListQuery asks for a page of a directory listing.
type ListQuery struct {
	Path   string
	Depth  int
	Limit  int
	Cursor string
}

// ListFiles lists the entries under a directory to a depth, a page at a
// time, in walk order (a directory before what is in it).
func (s *Service) ListFiles(ctx context.Context, t Target, q ListQuery) (api.List[api.FileEntry], error) {
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
		if _, err := Path("cursor", q.Cursor); err != nil {
			return api.List[api.FileEntry]{}, err
		}
	}
	sb, p, err := s.Live(ctx, t, "path", q.Path)
	if err != nil {
		return api.List[api.FileEntry]{}, err
	}
	return s.node.ListFiles(ctx, sb.ID, node.ListSpec{Path: p, Depth: q.Depth, Limit: q.Limit, After: q.Cursor})
}

// ReadFile opens a file's content, or the range and under the conditions
// req names; the answer says which status and headers to send.
func (s *Service) ReadFile(ctx context.Context, t Target, req node.ReadSpec) (*node.Content, error) {
	sb, p, err := s.Live(ctx, t, "path", req.Path)
	if err != nil {
		return nil, err
	}
	req.Path = p
	return s.node.ReadFile(ctx, sb.ID, req)
}

// WriteRequest is an upload of one file.
type WriteRequest struct {
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
	// Xattrs are the user.* extended attributes of the new content (the
	// old content's go with it); fspath.CheckXattrs bounds them.
	Xattrs map[string]string
}

// WriteFile replaces a file's content with body, atomically. created says
// the file is new.
func (s *Service) WriteFile(ctx context.Context, t Target, req WriteRequest, body io.Reader) (api.FileEntry, bool, error) {
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
	if err := fspath.CheckXattrs(req.Xattrs); err != nil {
		return api.FileEntry{}, false, invalid("%v", err)
	}
	sb, p, err := s.Live(ctx, t, "path", req.Path)
	if err != nil {
		return api.FileEntry{}, false, err
	}
	uid, gid = s.ownerIn(sb, req.User, uid, gid)
	spec := node.WriteSpec{
		Path: p, UID: uid, GID: gid, Chown: explicit, Mode: mode,
		IfMatch: req.IfMatch, IfNoneMatch: req.IfNoneMatch, SHA256: req.SHA256,
		Trailer: req.Trailer, Size: req.Size, Xattrs: req.Xattrs,
	}
	return s.node.WriteFile(ctx, sb.ID, spec, body)
}

// EditFile replaces, in turn, each edit's old text by its new one; each
// must occur exactly once, else nothing is written.
func (s *Service) EditFile(ctx context.Context, t Target, p string, ifMatch []string, req api.EditFileRequest) (api.FileEntry, error) {
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
	sb, p, err := s.Live(ctx, t, "path", p)
	if err != nil {
		return api.FileEntry{}, err
	}
	return s.node.EditFile(ctx, sb.ID, node.EditSpec{Path: p, IfMatch: ifMatch, Edits: edits})
}

// Mkdir creates a directory and its missing parents, owned by user.
func (s *Service) Mkdir(ctx context.Context, t Target, req api.MkdirRequest, user string) (api.FileEntry, error) {
	uid, gid, _, err := fileOwner(user)
	if err != nil {
		return api.FileEntry{}, err
	}
	sb, p, err := s.Live(ctx, t, "path", req.Path)
	if err != nil {
		return api.FileEntry{}, err
	}
	uid, gid = s.ownerIn(sb, user, uid, gid)
	return s.node.Mkdir(ctx, sb.ID, node.MkdirSpec{Path: p, UID: uid, GID: gid})
}

// MoveFile renames a file or directory; missing parents of the
// destination are created, owned by user.
func (s *Service) MoveFile(ctx context.Context, t Target, req api.MoveRequest, user string) (api.FileEntry, error) {
	uid, gid, _, err := fileOwner(user)
	if err != nil {
		return api.FileEntry{}, err
	}
	to, err := Path("to", req.To)
	if err != nil {
		return api.FileEntry{}, err
	}
	sb, from, err := s.Live(ctx, t, "from", req.From)
	if err != nil {
		return api.FileEntry{}, err
	}
	uid, gid = s.ownerIn(sb, user, uid, gid)
	return s.node.MoveFile(ctx, sb.ID, node.MoveSpec{From: from, To: to, Overwrite: req.Overwrite, UID: uid, GID: gid})
}

// RemoveFile removes a file, symlink or empty directory; with recursive, a
// directory and all in it.
func (s *Service) RemoveFile(ctx context.Context, t Target, p string, recursive bool) error {
	sb, p, err := s.Live(ctx, t, "path", p)
	if err != nil {
		return err
	}
	return s.node.RemoveFile(ctx, sb.ID, p, recursive)
}
