package e2b

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/files"
	"github.com/cove-dev/cove/internal/e2b/envd/filesystem"
	"github.com/cove-dev/cove/internal/node"
)

// Bounds of polled watchers. Each holds one of its sandbox's watches
// (maxWatches, shared with WatchDir), a reader of the node's watch
// journal of its directory, in the memory of the listener that made it.
const (
	// maxPolledWatchers bounds the watchers of all sandboxes together.
	maxPolledWatchers = 4096
	// watcherIdle is how long a watcher nobody reads is kept.
	watcherIdle = 10 * time.Minute
)

// polledWatchers are the watchers of CreateWatcher, read with
// GetWatcherEvents. A watcher reads the node's journal of its directory
// (the same watch of the sandbox's agent, over inotify, that WatchDir and
// the API's file watches read): each read answers the journal's records
// after the last one the read before took (by seq), so a change made and
// undone between two reads is reported, as envd's watchers report it.
// The journal keeps its last 4096 records; those it could not keep (a
// flood past its rate, a reader too far behind) have no envd event and
// are left out, as in WatchDir. A watcher whose journal's stream ends or
// breaks (the node restarted, the sandbox slept) reads it again from its
// last seq at the next read. Watchers are not stored: they live in this
// listener's memory, are removed by RemoveWatcher, and vanish with their
// directory or sandbox (a read that finds either gone), when unread for
// watcherIdle, and with the listener.
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
	recursive bool
	withEntry bool
	slot      func() // gives the sandbox's watch back

	// mu makes a watcher's reads one at a time, each going on from the
	// seq the one before it left.
	mu    sync.Mutex
	after int64 // the seq of the last record read
	used  time.Time

	// fwMu guards fw, which release closes while a read may hold mu.
	fwMu    sync.Mutex
	fw      node.FileWatch // nil: to be opened again from after
	removed bool
}

// reader is the watcher's journal reader, nil when it must be opened
// again.
func (pw *polledWatcher) reader() node.FileWatch {
	pw.fwMu.Lock()
	defer pw.fwMu.Unlock()
	return pw.fw
}

// setReader puts fw in place of the reader (closing the one before); a
// removed watcher closes it instead.
func (pw *polledWatcher) setReader(fw node.FileWatch) {
	pw.fwMu.Lock()
	defer pw.fwMu.Unlock()
	if pw.fw != nil {
		pw.fw.Close()
	}
	pw.fw = nil
	if pw.removed {
		if fw != nil {
			fw.Close()
		}
		return
	}
	pw.fw = fw
}

// release closes the watcher's reader and gives its watch back. Called
// once, by whoever removes the watcher.
func (pw *polledWatcher) release() {
	pw.fwMu.Lock()
	pw.removed = true
	if pw.fw != nil {
		pw.fw.Close()
		pw.fw = nil
	}
	pw.fwMu.Unlock()
	pw.slot()
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

// drain is what the watcher's journal holds past its last read, without
// waiting: the records, in order, and the error that ended the reader
// (nil while it lives). A record the journal could not keep (dropped)
// is passed over.
func (pw *polledWatcher) drain(fw node.FileWatch) ([]api.FileEvent, error) {
	done, cancel := context.WithCancel(context.Background())
	cancel() // Next hands over what it holds, then says the context ended
	var out []api.FileEvent
	for {
		ev, err := fw.Next(done)
		switch {
		case err == nil:
			pw.after = ev.Seq
			if ev.Type != api.FileDropped {
				out = append(out, ev)
			}
		case done.Err() != nil && errors.Is(err, context.Canceled):
			return out, nil
		default:
			return out, err
		}
	}
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
	w := &f.polled
	w.mu.Lock()
	w.sweep()
	full := len(w.byID) >= maxPolledWatchers
	w.mu.Unlock()
	if full {
		return nil, connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("the listener holds %d watchers, its most; remove some", maxPolledWatchers))
	}
	slot, err := f.watchSlot(tg.SandboxID)
	if err != nil {
		return nil, err
	}
	// The watch is in place once this returns: a change made after the
	// answer is reported. Its reader outlives this request.
	fw, err := f.files.WatchFiles(ctx, t, files.WatchQuery{Path: p, Recursive: req.Msg.GetRecursive()})
	if err != nil {
		slot()
		return nil, rpcError(err)
	}
	var b [16]byte
	rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.byID) >= maxPolledWatchers {
		fw.Close()
		slot()
		return nil, connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("the listener holds %d watchers, its most; remove some", maxPolledWatchers))
	}
	if w.byID == nil {
		w.byID = map[string]*polledWatcher{}
	}
	w.byID[id] = &polledWatcher{
		target: tg, dir: p, recursive: req.Msg.GetRecursive(), withEntry: req.Msg.GetIncludeEntry(), slot: slot,
		fw: fw, used: w.clock(),
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
	if f.polled.ended(ctx, pw.target) {
		// The sandbox is gone or going, and the watch with it, whether
		// or not its journal has ended yet.
		f.polled.remove(id, pw)
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("watcher %q not found: its sandbox has ended", id))
	}
	resp := &filesystem.GetWatcherEventsResponse{Events: []*filesystem.FilesystemEvent{}}
	for reopened := false; ; reopened = true {
		fw := pw.reader()
		if fw == nil {
			// The journal's stream ended: read it again from the last
			// seq read (a journal gone meanwhile answers a dropped
			// record, passed over).
			var err error
			fw, err = f.files.WatchFiles(ctx, fileTarget(pw.target), files.WatchQuery{Path: pw.dir, Recursive: pw.recursive, After: pw.after})
			if err != nil {
				if api.ErrorCode(err) == api.CodeNotFound || f.polled.ended(ctx, pw.target) {
					// The directory or its sandbox is gone, and the
					// watch with it.
					f.polled.remove(id, pw)
					return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("watcher %q not found: %v", id, err))
				}
				return nil, rpcError(err)
			}
			pw.setReader(fw)
			reopened = true
		}
		evs, err := pw.drain(fw)
		for _, ev := range evs {
			resp.Events = append(resp.Events, envdEvents(pw.dir, ev, pw.withEntry)...)
		}
		if err == nil {
			break
		}
		// The stream ended (the directory went, the sandbox stopped) or
		// broke. What it held is answered; with nothing to answer, it is
		// opened again at once, which says whether the directory is
		// still there.
		pw.setReader(nil)
		if len(resp.Events) > 0 || reopened {
			break
		}
	}
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
