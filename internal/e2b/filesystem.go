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

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/files"
	"github.com/cove-dev/cove/internal/e2b/envd/filesystem"
	"github.com/cove-dev/cove/internal/e2b/envd/filesystem/filesystemconnect"
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
		Metadata: map[string]string{},
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
	depth := int(req.Msg.GetDepth())
	if depth == 0 {
		depth = 1
	}
	var entries []api.FileEntry
	q := files.ListQuery{Path: p, Depth: depth, Limit: 1000}
	for {
		l, err := f.files.ListFiles(ctx, t, q)
		if err != nil {
			return nil, rpcError(err)
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
	resp := &filesystem.ListDirResponse{Entries: make([]*filesystem.EntryInfo, 0, len(entries))}
	for _, e := range entries {
		resp.Entries = append(resp.Entries, entryInfo(e))
	}
	return connect.NewResponse(resp), nil
}

// errNoWatch answers the watch calls: cove's file calls have no watch.
var errNoWatch = connect.NewError(connect.CodeUnimplemented, errors.New("watching directories is not supported by cove's E2B listener (docs/e2b.md)"))

func (f *fsService) WatchDir(context.Context, *connect.Request[filesystem.WatchDirRequest], *connect.ServerStream[filesystem.WatchDirResponse]) error {
	return errNoWatch
}

func (f *fsService) CreateWatcher(context.Context, *connect.Request[filesystem.CreateWatcherRequest]) (*connect.Response[filesystem.CreateWatcherResponse], error) {
	return nil, errNoWatch
}
