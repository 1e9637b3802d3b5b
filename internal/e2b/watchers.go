package e2b

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/files"
	"github.com/cove-dev/cove/internal/e2b/envd/filesystem"
	"github.com/cove-dev/cove/internal/fspath"
)

// Bounds of polled watchers. Each holds one of its sandbox's watches
// (maxWatches, shared with WatchDir) and its last listing, in the memory
// of the listener that made it.
const (
	// maxPolledWatchers bounds the watchers of all sandboxes together.
	maxPolledWatchers = 4096
	// watcherIdle is how long a watcher nobody reads is kept.
	watcherIdle = 10 * time.Minute
)

// polledWatchers are the watchers of CreateWatcher, read with
// GetWatcherEvents. cove's file calls have no watch of the kernel's, so a
// watcher is a listing of its directory: each read lists it again and
// answers the changes since the last read (or the watcher's creation),
// as WatchDir's polls do (diff). A change undone between two reads is not
// seen. Watchers are not stored: they live in this listener's memory, are
// removed by RemoveWatcher, and vanish with their directory or sandbox
// (a read that finds either gone), when unread for watcherIdle, and with
// the listener.
type polledWatchers struct {
	// now is the clock of idleness; nil is time.Now.
	now func() time.Time
	// sandboxes say whether a watcher's sandbox has ended (nil: never
	// asked).
	sandboxes Sandboxes

	mu   sync.Mutex
	byID map[string]*polledWatcher
}

type polledWatcher struct {
	target    target
	dir       string
	depth     int
	withEntry bool
	release   func()

	// mu makes a watcher's reads one at a time, each diffing from the
	// listing the one before it left.
	mu     sync.Mutex
	before map[string]api.FileEntry
	used   time.Time
}

func (w *polledWatchers) clock() time.Time {
	if w.now != nil {
		return w.now()
	}
	return time.Now()
}

// sweep removes the watchers unread for watcherIdle. Called with w.mu
// held.
func (w *polledWatchers) sweep() {
	now := w.clock()
	for id, pw := range w.byID {
		if pw.mu.TryLock() {
			idle := now.Sub(pw.used) >= watcherIdle
			pw.mu.Unlock()
			if idle {
				delete(w.byID, id)
				pw.release()
			}
		}
	}
}

// get is the watcher of that ID for the request's sandbox: another
// sandbox's, even of the same team, is not found.
func (w *polledWatchers) get(t target, id string) (*polledWatcher, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.sweep()
	pw, ok := w.byID[id]
	if !ok || pw.target != t {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("watcher %q not found", id))
	}
	return pw, nil
}

// ended reports that a watcher's sandbox is gone or ending for good
// (terminating, terminated, failed); an asleep one keeps its watchers.
func (w *polledWatchers) ended(ctx context.Context, t target) bool {
	if w.sandboxes == nil {
		return false
	}
	sb, err := w.sandboxes.GetSandbox(ctx, t.TeamID, t.SandboxID)
	if err != nil {
		return api.ErrorCode(err) == api.CodeNotFound
	}
	return sb.State.Terminal() || sb.State == api.StateTerminating
}

// remove drops a watcher and gives its watch back, once.
func (w *polledWatchers) remove(id string, pw *polledWatcher) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.byID[id] == pw {
		delete(w.byID, id)
		pw.release()
	}
}

// snapshot lists a watched tree, by path.
func (f *fsService) snapshot(ctx context.Context, t files.Target, dir string, depth int) (map[string]api.FileEntry, error) {
	entries, err := f.list(ctx, t, dir, depth, maxWatchedEntries)
	if err != nil {
		return nil, err
	}
	m := make(map[string]api.FileEntry, len(entries))
	for _, e := range entries {
		m[e.Path] = e
	}
	return m, nil
}

func (f *fsService) CreateWatcher(ctx context.Context, req *connect.Request[filesystem.CreateWatcherRequest]) (*connect.Response[filesystem.CreateWatcherResponse], error) {
	user, err := userOf(req.Header())
	if err != nil {
		return nil, err
	}
	tg := targetOf(ctx)
	t, p := fileTarget(tg), absPath(user, req.Msg.GetPath())
	dir, err := f.files.StatFile(ctx, t, p)
	if err != nil {
		return nil, rpcError(err)
	}
	if dir.Type != api.FileTypeDir {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("%s is not a directory", p))
	}
	depth := 1
	if req.Msg.GetRecursive() {
		depth = fspath.MaxListDepth
	}
	before, err := f.snapshot(ctx, t, p, depth)
	if err != nil {
		return nil, rpcError(err)
	}
	w := &f.polled
	w.mu.Lock()
	defer w.mu.Unlock()
	w.sweep()
	if len(w.byID) >= maxPolledWatchers {
		return nil, connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("the listener holds %d watchers, its most; remove some", maxPolledWatchers))
	}
	release, err := f.watchSlot(tg.SandboxID)
	if err != nil {
		return nil, err
	}
	var b [16]byte
	rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	if w.byID == nil {
		w.byID = map[string]*polledWatcher{}
	}
	w.byID[id] = &polledWatcher{
		target: tg, dir: p, depth: depth, withEntry: req.Msg.GetIncludeEntry(), release: release,
		before: before, used: w.clock(),
	}
	return connect.NewResponse(&filesystem.CreateWatcherResponse{WatcherId: id}), nil
}

func (f *fsService) GetWatcherEvents(ctx context.Context, req *connect.Request[filesystem.GetWatcherEventsRequest]) (*connect.Response[filesystem.GetWatcherEventsResponse], error) {
	id := req.Msg.GetWatcherId()
	pw, err := f.polled.get(targetOf(ctx), id)
	if err != nil {
		return nil, err
	}
	pw.mu.Lock()
	defer pw.mu.Unlock()
	pw.used = f.polled.clock()
	after, err := f.snapshot(ctx, fileTarget(pw.target), pw.dir, pw.depth)
	if err != nil {
		if api.ErrorCode(err) == api.CodeNotFound || f.polled.ended(ctx, pw.target) {
			// The directory or its sandbox is gone, and the watch with it.
			f.polled.remove(id, pw)
			return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("watcher %q not found: %v", id, err))
		}
		return nil, rpcError(err)
	}
	resp := &filesystem.GetWatcherEventsResponse{Events: []*filesystem.FilesystemEvent{}}
	for _, ev := range diff(pw.dir, pw.before, after, pw.withEntry) {
		resp.Events = append(resp.Events, ev.GetFilesystem())
	}
	pw.before = after
	return connect.NewResponse(resp), nil
}

func (f *fsService) RemoveWatcher(ctx context.Context, req *connect.Request[filesystem.RemoveWatcherRequest]) (*connect.Response[filesystem.RemoveWatcherResponse], error) {
	id := req.Msg.GetWatcherId()
	pw, err := f.polled.get(targetOf(ctx), id)
	if err != nil {
		return nil, err
	}
	f.polled.remove(id, pw)
	return connect.NewResponse(&filesystem.RemoveWatcherResponse{}), nil
}
