package e2b

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/files"
	"github.com/cove-dev/cove/internal/e2b/envd/filesystem"
	"github.com/cove-dev/cove/internal/e2b/envd/filesystem/filesystemconnect"
	"github.com/cove-dev/cove/internal/fspath"
	"github.com/cove-dev/cove/internal/node"
)

// Files are a sandbox's file calls the filesystem service and the files
// API make (files.Service).
type Files interface {
	StatFile(ctx context.Context, t files.Target, p string) (api.FileEntry, error)
	ListFiles(ctx context.Context, t files.Target, q files.ListQuery) (api.List[api.FileEntry], error)
	ReadFile(ctx context.Context, t files.Target, req node.ReadSpec) (*node.Content, error)
	WriteFile(ctx context.Context, t files.Target, req files.WriteRequest, body io.Reader) (api.FileEntry, bool, error)
	Mkdir(ctx context.Context, t files.Target, req api.MkdirRequest, user string) (api.FileEntry, error)
	MoveFile(ctx context.Context, t files.Target, req api.MoveRequest, user string) (api.FileEntry, error)
	RemoveFile(ctx context.Context, t files.Target, p string, recursive bool) error
	WatchFiles(ctx context.Context, t files.Target, q files.WatchQuery) (node.FileWatch, error)
}

var _ Files = (*files.Service)(nil)

// homeOf is a user's home, where relative paths start.
func homeOf(user string) string {
	if user == "root" {
		return "/root"
	}
	return Home
}

// absPath resolves p as envd does: relative to the user's home.
func absPath(user, p string) string {
	if p == "" {
		return homeOf(user)
	}
	if !strings.HasPrefix(p, "/") {
		p = homeOf(user) + "/" + p
	}
	return path.Clean(p)
}

// fileTarget is the sandbox of a request as the files service names it;
// a sandbox asleep is not woken by a file call, as E2B's paused one is
// not reachable.
func fileTarget(t target) files.Target {
	return files.Target{TeamID: t.TeamID, Ref: t.SandboxID}
}

// ownerName names the owners a sandbox has: its root and its user.
func ownerName(id int) string {
	switch id {
	case 0:
		return "root"
	case 1000:
		return "user"
	}
	return strconv.Itoa(id)
}

// entryInfo is envd's EntryInfo of a cove file entry.
func entryInfo(e api.FileEntry) *filesystem.EntryInfo {
	mode, _ := strconv.ParseUint(e.Mode, 8, 32)
	info := &filesystem.EntryInfo{
		Name: e.Name, Path: e.Path, Size: e.Size, Mode: uint32(mode),
		Owner: ownerName(e.UID), Group: ownerName(e.GID), ModifiedTime: timestamppb.New(e.MTime),
		Metadata: metadataOf(e),
	}
	kind := "-"
	switch e.Type {
	case api.FileTypeFile:
		info.Type = filesystem.FileType_FILE_TYPE_FILE
	case api.FileTypeDir:
		info.Type, kind = filesystem.FileType_FILE_TYPE_DIRECTORY, "d"
	case api.FileTypeSymlink:
		info.Type, kind = filesystem.FileType_FILE_TYPE_SYMLINK, "l"
		target := e.Target
		if !strings.HasPrefix(target, "/") {
			target = path.Join(path.Dir(e.Path), target)
		}
		info.SymlinkTarget = &target
	}
	info.Permissions = kind + permString(uint32(mode))
	return info
}

// metadataPrefix holds E2B's file metadata among a file's extended
// attributes: metadata key k is the xattr user.e2b.k.
const metadataPrefix = "user.e2b."

// metadataOf is the E2B metadata of an entry: its user.e2b.* extended
// attributes, the prefix taken off (empty, never nil).
func metadataOf(e api.FileEntry) map[string]string {
	m := map[string]string{}
	for name, v := range e.Xattrs {
		if k, ok := strings.CutPrefix(name, metadataPrefix); ok && k != "" {
			m[k] = v
		}
	}
	return m
}

// permString is permission bits as `ls -l` shows them (rwxr-xr-x).
func permString(mode uint32) string {
	const rwx = "rwxrwxrwx"
	b := []byte("---------")
	for i := range 9 {
		if mode&(1<<(8-i)) != 0 {
			b[i] = rwx[i]
		}
	}
	return string(b)
}

// fsService serves envd's filesystem.Filesystem over cove's file calls.
type fsService struct {
	filesystemconnect.UnimplementedFilesystemHandler
	files Files

	mu sync.Mutex
	// watches counts each sandbox's open watches (at most maxWatches).
	watches map[string]int
	// polled are the watchers of CreateWatcher (watchers.go).
	polled polledWatchers
}

// maxWatches bounds a sandbox's watches: a WatchDir and a polled
// watcher each hold a reader of the node's watch journal of a directory.
const maxWatches = 16

// watchSlot takes one of a sandbox's watches, or says there is none left;
// release gives it back.
func (f *fsService) watchSlot(sandboxID string) (release func(), err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.watches[sandboxID] >= maxWatches {
		return nil, connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("a sandbox has at most %d watches open", maxWatches))
	}
	if f.watches == nil {
		f.watches = map[string]int{}
	}
	f.watches[sandboxID]++
	return func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.watches[sandboxID]--; f.watches[sandboxID] == 0 {
			delete(f.watches, sandboxID)
		}
	}, nil
}

func (f *fsService) Stat(ctx context.Context, req *connect.Request[filesystem.StatRequest]) (*connect.Response[filesystem.StatResponse], error) {
	user, err := userOf(req.Header())
	if err != nil {
		return nil, err
	}
	e, err := f.files.StatFile(ctx, fileTarget(targetOf(ctx)), absPath(user, req.Msg.GetPath()))
	if err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&filesystem.StatResponse{Entry: entryInfo(e)}), nil
}

func (f *fsService) MakeDir(ctx context.Context, req *connect.Request[filesystem.MakeDirRequest]) (*connect.Response[filesystem.MakeDirResponse], error) {
	user, err := userOf(req.Header())
	if err != nil {
		return nil, err
	}
	t, p := fileTarget(targetOf(ctx)), absPath(user, req.Msg.GetPath())
	if _, err := f.files.StatFile(ctx, t, p); err == nil {
		return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("%s already exists", p))
	} else if api.ErrorCode(err) != api.CodeNotFound {
		return nil, rpcError(err)
	}
	e, err := f.files.Mkdir(ctx, t, api.MkdirRequest{Path: p}, user)
	if err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&filesystem.MakeDirResponse{Entry: entryInfo(e)}), nil
}

func (f *fsService) Move(ctx context.Context, req *connect.Request[filesystem.MoveRequest]) (*connect.Response[filesystem.MoveResponse], error) {
	user, err := userOf(req.Header())
	if err != nil {
		return nil, err
	}
	e, err := f.files.MoveFile(ctx, fileTarget(targetOf(ctx)), api.MoveRequest{
		From: absPath(user, req.Msg.GetSource()), To: absPath(user, req.Msg.GetDestination()), Overwrite: true,
	}, user)
	if err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&filesystem.MoveResponse{Entry: entryInfo(e)}), nil
}

func (f *fsService) Remove(ctx context.Context, req *connect.Request[filesystem.RemoveRequest]) (*connect.Response[filesystem.RemoveResponse], error) {
	user, err := userOf(req.Header())
	if err != nil {
		return nil, err
	}
	// Removing what is not there succeeds, as envd's does.
	if err := f.files.RemoveFile(ctx, fileTarget(targetOf(ctx)), absPath(user, req.Msg.GetPath()), true); err != nil && api.ErrorCode(err) != api.CodeNotFound {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&filesystem.RemoveResponse{}), nil
}

// ListDir lists a directory to a depth (default 1), depth first, each
// directory's entries in lexical order, as envd walks.
func (f *fsService) ListDir(ctx context.Context, req *connect.Request[filesystem.ListDirRequest]) (*connect.Response[filesystem.ListDirResponse], error) {
	user, err := userOf(req.Header())
	if err != nil {
		return nil, err
	}
	t, p := fileTarget(targetOf(ctx)), absPath(user, req.Msg.GetPath())
	dir, err := f.files.StatFile(ctx, t, p)
	if err != nil {
		return nil, rpcError(err)
	}
	if dir.Type != api.FileTypeDir {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("%s is not a directory", p))
	}
	entries, err := f.list(ctx, t, p, int(req.Msg.GetDepth()))
	if err != nil {
		return nil, rpcError(err)
	}
	resp := &filesystem.ListDirResponse{Entries: make([]*filesystem.EntryInfo, 0, len(entries))}
	for _, e := range entries {
		resp.Entries = append(resp.Entries, entryInfo(e))
	}
	return connect.NewResponse(resp), nil
}

// list is everything under dir to depth (default 1, at most cove's
// deepest listing), depth first, each directory in lexical order.
func (f *fsService) list(ctx context.Context, t files.Target, dir string, depth int) ([]api.FileEntry, error) {
	depth = min(max(depth, 1), fspath.MaxListDepth)
	var entries []api.FileEntry
	q := files.ListQuery{Path: dir, Depth: depth, Limit: fspath.MaxListLimit}
	for {
		l, err := f.files.ListFiles(ctx, t, q)
		if err != nil {
			return nil, err
		}
		entries = append(entries, l.Items...)
		if l.NextCursor == "" {
			break
		}
		q.Cursor = l.NextCursor
	}
	slices.SortFunc(entries, func(a, b api.FileEntry) int {
		return slices.Compare(strings.Split(a.Path, "/"), strings.Split(b.Path, "/"))
	})
	return entries, nil
}

// WatchDir reports changes under a directory as they happen: it reads
// the node's journal of the directory (the same watch of the sandbox's
// agent, over inotify, that the API's file watches read), from the moment
// it starts. Records the journal could not keep (a flood past its rate)
// have no envd event: they are left out.
func (f *fsService) WatchDir(ctx context.Context, req *connect.Request[filesystem.WatchDirRequest], stream *connect.ServerStream[filesystem.WatchDirResponse]) error {
	user, err := userOf(req.Header())
	if err != nil {
		return err
	}
	t, p := fileTarget(targetOf(ctx)), absPath(user, req.Msg.GetPath())
	dir, err := f.files.StatFile(ctx, t, p)
	if err != nil {
		return rpcError(err)
	}
	if dir.Type != api.FileTypeDir {
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("%s is not a directory", p))
	}
	release, err := f.watchSlot(t.Ref)
	if err != nil {
		return err
	}
	defer release()
	fw, err := f.files.WatchFiles(ctx, t, files.WatchQuery{Path: p, Recursive: req.Msg.GetRecursive()})
	if err != nil {
		return rpcError(err)
	}
	defer fw.Close()
	if err := stream.Send(&filesystem.WatchDirResponse{Event: &filesystem.WatchDirResponse_Start{Start: &filesystem.WatchDirResponse_StartEvent{}}}); err != nil {
		return err
	}
	for {
		nctx, cancel := context.WithTimeout(ctx, keepalive)
		ev, err := fw.Next(nctx)
		cancel()
		switch {
		case err == nil:
			for _, out := range envdEvents(p, ev, req.Msg.GetIncludeEntry()) {
				if err := stream.Send(&filesystem.WatchDirResponse{Event: &filesystem.WatchDirResponse_Filesystem{Filesystem: out}}); err != nil {
					return err
				}
			}
		case ctx.Err() != nil:
			return nil // the client stopped watching
		case nctx.Err() != nil:
			if err := stream.Send(&filesystem.WatchDirResponse{Event: &filesystem.WatchDirResponse_Keepalive{Keepalive: &filesystem.WatchDirResponse_KeepAlive{}}}); err != nil {
				return err
			}
		case errors.Is(err, io.EOF):
			return nil // the directory or its sandbox is gone
		default:
			return rpcError(err)
		}
	}
}

// envdTypes are the envd event types of a watch's records.
var envdTypes = map[api.FileEventType]filesystem.EventType{
	api.FileCreate: filesystem.EventType_EVENT_TYPE_CREATE,
	api.FileWrite:  filesystem.EventType_EVENT_TYPE_WRITE,
	api.FileRemove: filesystem.EventType_EVENT_TYPE_REMOVE,
	api.FileRename: filesystem.EventType_EVENT_TYPE_RENAME,
	api.FileChmod:  filesystem.EventType_EVENT_TYPE_CHMOD,
}

// envdEvents are a watch record of dir as envd reports it (the name
// relative to dir); none for a record envd has no event for. A file that
// appears with bytes in it (cove's file calls write a new file aside and
// move it into place) is a CREATE and a WRITE, as envd reports a write.
func envdEvents(dir string, ev api.FileEvent, withEntry bool) []*filesystem.FilesystemEvent {
	kind, ok := envdTypes[ev.Type]
	if !ok || ev.Path == dir {
		return nil
	}
	name := strings.TrimPrefix(ev.Path, strings.TrimSuffix(dir, "/")+"/")
	one := func(kind filesystem.EventType) *filesystem.FilesystemEvent {
		out := &filesystem.FilesystemEvent{Name: name, Type: kind}
		if withEntry && ev.Entry != nil {
			out.Entry = entryInfo(*ev.Entry)
		}
		return out
	}
	out := []*filesystem.FilesystemEvent{one(kind)}
	if ev.Type == api.FileCreate && ev.Entry != nil && ev.Entry.Type == api.FileTypeFile && ev.Entry.Size > 0 {
		out = append(out, one(filesystem.EventType_EVENT_TYPE_WRITE))
	}
	return out
}
