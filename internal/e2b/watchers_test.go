package e2b

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/files"
	"github.com/cove-dev/cove/internal/control/lifecycle"
	"github.com/cove-dev/cove/internal/e2b/envd/filesystem"
	"github.com/cove-dev/cove/internal/e2b/envd/filesystem/filesystemconnect"
	"github.com/cove-dev/cove/internal/node"
)

func (h *harness) fsClient(id, token string) filesystemconnect.FilesystemClient {
	hdr := http.Header{"E2b-Sandbox-Id": {id}, "X-Access-Token": {token}}
	return filesystemconnect.NewFilesystemClient(&http.Client{Transport: withHeaders{hdr}}, h.side.URL, connect.WithProtoJSON())
}

func eventNames(evs []*filesystem.FilesystemEvent) string {
	var out []string
	for _, ev := range evs {
		out = append(out, strings.TrimPrefix(ev.Type.String(), "EVENT_TYPE_")+":"+ev.Name)
	}
	return strings.Join(out, " ")
}

// TestPolledWatchers: a watcher answers the changes under its directory
// since its last read (or its creation), read by read; it is its
// sandbox's alone (another sandbox's token, of another team, finds
// nothing of it); it is gone once removed; a missing directory or a file
// is refused.
func TestPolledWatchers(t *testing.T) {
	h := newHarness(t)
	sb := h.create("key-a", map[string]any{"templateID": "base"})
	other := h.create("key-b", map[string]any{"templateID": "base"})
	c, oc := h.fsClient(sb.SandboxID, sb.EnvdAccessToken), h.fsClient(other.SandboxID, other.EnvdAccessToken)
	ctx := t.Context()
	h.files.dirs["/home/user/w"] = true
	cw, err := c.CreateWatcher(ctx, connect.NewRequest(&filesystem.CreateWatcherRequest{Path: "w", Recursive: true, IncludeEntry: true}))
	if err != nil {
		t.Fatal(err)
	}
	id := cw.Msg.WatcherId
	read := func(c filesystemconnect.FilesystemClient) ([]*filesystem.FilesystemEvent, error) {
		r, err := c.GetWatcherEvents(ctx, connect.NewRequest(&filesystem.GetWatcherEventsRequest{WatcherId: id}))
		if err != nil {
			return nil, err
		}
		return r.Msg.Events, nil
	}
	steps := []struct {
		change func()
		want   string
	}{
		{func() {}, ""},
		{func() {
			h.files.dirs["/home/user/w/sub"] = true
			h.files.data["/home/user/w/sub/f.txt"] = "x"
		}, "CREATE:sub CREATE:sub/f.txt WRITE:sub/f.txt"},
		{func() {}, ""},
		{func() { h.files.data["/home/user/w/sub/f.txt"] = "xy" }, "WRITE:sub/f.txt"},
		{func() { delete(h.files.data, "/home/user/w/sub/f.txt") }, "REMOVE:sub/f.txt"},
	}
	for i, s := range steps {
		h.files.change(s.change)
		evs, err := read(c)
		if err != nil {
			t.Fatalf("read %d: %v", i, err)
		}
		if got := eventNames(evs); got != s.want {
			t.Errorf("read %d: %q, want %q", i, got, s.want)
		}
		if i == 1 && (evs[1].Entry == nil || evs[1].Entry.Size != 1) {
			t.Errorf("includeEntry: %v", evs[1].Entry)
		}
	}
	// Another sandbox's token finds nothing of this watcher, and takes
	// none of its changes.
	h.files.change(func() { h.files.data["/home/user/w/late.txt"] = "z" })
	if _, err := read(oc); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("another sandbox read the watcher: %v; want not_found", err)
	}
	if _, err := oc.RemoveWatcher(ctx, connect.NewRequest(&filesystem.RemoveWatcherRequest{WatcherId: id})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("another sandbox removed the watcher: %v; want not_found", err)
	}
	if evs, err := read(c); err != nil || eventNames(evs) != "CREATE:late.txt WRITE:late.txt" {
		t.Errorf("after the other sandbox's tries: %q %v", eventNames(evs), err)
	}
	if _, err := c.RemoveWatcher(ctx, connect.NewRequest(&filesystem.RemoveWatcherRequest{WatcherId: id})); err != nil {
		t.Fatal(err)
	}
	if _, err := read(c); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("read a removed watcher: %v; want not_found", err)
	}
	if _, err := c.RemoveWatcher(ctx, connect.NewRequest(&filesystem.RemoveWatcherRequest{WatcherId: id})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("remove twice: %v; want not_found", err)
	}
	h.files.data["/home/user/file"] = "f"
	for path, code := range map[string]connect.Code{"missing": connect.CodeNotFound, "file": connect.CodeInvalidArgument} {
		if _, err := c.CreateWatcher(ctx, connect.NewRequest(&filesystem.CreateWatcherRequest{Path: path})); connect.CodeOf(err) != code {
			t.Errorf("watch %s: %v; want %v", path, err, code)
		}
	}
}

// TestPolledWatcherBetweenReads: a read answers every change since the
// read before, from the watch's journal: a file made and removed again
// between two reads is reported, made then removed, which two listings
// of the directory would not show.
func TestPolledWatcherBetweenReads(t *testing.T) {
	h := newHarness(t)
	sb := h.create("key-a", map[string]any{"templateID": "base"})
	c := h.fsClient(sb.SandboxID, sb.EnvdAccessToken)
	ctx := t.Context()
	h.files.dirs["/home/user/w"] = true
	cw, err := c.CreateWatcher(ctx, connect.NewRequest(&filesystem.CreateWatcherRequest{Path: "w"}))
	if err != nil {
		t.Fatal(err)
	}
	read := func() string {
		t.Helper()
		r, err := c.GetWatcherEvents(ctx, connect.NewRequest(&filesystem.GetWatcherEventsRequest{WatcherId: cw.Msg.WatcherId}))
		if err != nil {
			t.Fatal(err)
		}
		return eventNames(r.Msg.Events)
	}
	if got := read(); got != "" {
		t.Errorf("first read: %q; want nothing", got)
	}
	h.files.change(func() { h.files.data["/home/user/w/tmp.txt"] = "x" })
	h.files.change(func() { delete(h.files.data, "/home/user/w/tmp.txt") })
	h.files.change(func() { h.files.data["/home/user/w/kept.txt"] = "" })
	if got, want := read(), "CREATE:tmp.txt WRITE:tmp.txt REMOVE:tmp.txt CREATE:kept.txt"; got != want {
		t.Errorf("read after a file came and went: %q; want %q", got, want)
	}
	if got := read(); got != "" {
		t.Errorf("a read with no change since: %q; want nothing", got)
	}
}

// goneFiles lists nothing of a directory that is not there: not_found,
// as the node answers for a removed directory or a sandbox gone.
type goneFiles struct{ *fakeFiles }

func (g goneFiles) ListFiles(ctx context.Context, t files.Target, q files.ListQuery) (api.List[api.FileEntry], error) {
	g.mu.Lock()
	ok := g.dirs[q.Path]
	g.mu.Unlock()
	if !ok {
		return api.List[api.FileEntry]{}, api.Errorf(api.CodeNotFound, "%s does not exist", q.Path)
	}
	return g.fakeFiles.ListFiles(ctx, t, q)
}

// TestPolledWatcherBounds: polled watchers take the sandbox's watches
// (maxWatches, shared with WatchDir), another sandbox's are its own; a
// watcher unread for watcherIdle, or whose directory is gone, gives its
// watch back.
func TestPolledWatcherBounds(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	ff := newFakeFiles()
	ff.dirs["/home/user/w"] = true
	f := &fsService{files: goneFiles{ff}}
	f.polled.now = func() time.Time { return now }
	in := func(sandbox string) context.Context {
		return context.WithValue(t.Context(), targetKey{}, target{TeamID: "team_" + sandbox, SandboxID: sandbox})
	}
	create := func(sandbox string) (string, error) {
		r, err := f.CreateWatcher(in(sandbox), connect.NewRequest(&filesystem.CreateWatcherRequest{Path: "w"}))
		if err != nil {
			return "", err
		}
		return r.Msg.WatcherId, nil
	}
	stream, err := f.watchSlot("sbx_a") // a WatchDir's
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for range maxWatches - 1 {
		id, err := create("sbx_a")
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if _, err := create("sbx_a"); connect.CodeOf(err) != connect.CodeResourceExhausted {
		t.Errorf("watch %d: %v; want resource_exhausted", maxWatches+1, err)
	}
	other, err := create("sbx_b")
	if err != nil {
		t.Fatalf("another sandbox's first watcher: %v", err)
	}
	stream()
	if _, err := create("sbx_a"); err != nil {
		t.Errorf("a watcher once a WatchDir ended: %v", err)
	}
	// Unread for watcherIdle, but one that was read meanwhile: all but
	// that one go.
	now = now.Add(watcherIdle / 2)
	if _, err := f.GetWatcherEvents(in("sbx_a"), connect.NewRequest(&filesystem.GetWatcherEventsRequest{WatcherId: ids[0]})); err != nil {
		t.Fatal(err)
	}
	now = now.Add(watcherIdle / 2)
	for range maxWatches - 1 {
		if _, err := create("sbx_a"); err != nil {
			t.Fatalf("after the idle ones went: %v", err)
		}
	}
	if _, err := create("sbx_a"); connect.CodeOf(err) != connect.CodeResourceExhausted {
		t.Errorf("the read watcher went too, or an idle one stayed: %v", err)
	}
	if _, err := f.GetWatcherEvents(in("sbx_b"), connect.NewRequest(&filesystem.GetWatcherEventsRequest{WatcherId: other})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("an idle watcher of sbx_b: %v; want not_found", err)
	}
	// The directory goes: the next read answers not_found, and the watch
	// is given back.
	ff.change(func() { delete(ff.dirs, "/home/user/w") })
	if _, err := f.GetWatcherEvents(in("sbx_a"), connect.NewRequest(&filesystem.GetWatcherEventsRequest{WatcherId: ids[0]})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("read after the directory went: %v; want not_found", err)
	}
	if r, err := f.watchSlot("sbx_a"); err != nil {
		t.Errorf("the gone directory's watcher kept its watch: %v", err)
	} else {
		r()
	}
}

// failingFiles fails every listing and watch with fail, once it is set.
type failingFiles struct {
	*fakeFiles
	fail *error
}

func (f failingFiles) ListFiles(ctx context.Context, t files.Target, q files.ListQuery) (api.List[api.FileEntry], error) {
	if *f.fail != nil {
		return api.List[api.FileEntry]{}, *f.fail
	}
	return f.fakeFiles.ListFiles(ctx, t, q)
}

func (f failingFiles) WatchFiles(ctx context.Context, t files.Target, q files.WatchQuery) (node.FileWatch, error) {
	if *f.fail != nil {
		return nil, *f.fail
	}
	return f.fakeFiles.WatchFiles(ctx, t, q)
}

// TestPolledWatcherSandboxEnds: a read that fails while the sandbox lives
// (asleep, say) keeps the watcher; once the sandbox is terminated the
// watcher is gone (not_found) and its watch given back.
func TestPolledWatcherSandboxEnds(t *testing.T) {
	plane := &fakePlane{now: time.Now}
	sb, err := plane.CreateSandboxWith(t.Context(), "team_a", api.CreateSandboxRequest{}, lifecycle.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ff := newFakeFiles()
	ff.dirs["/home/user/w"] = true
	var fail error
	f := &fsService{files: failingFiles{ff, &fail}}
	f.polled.sandboxes = plane
	ctx := context.WithValue(t.Context(), targetKey{}, target{TeamID: "team_a", SandboxID: sb.ID})
	cw, err := f.CreateWatcher(ctx, connect.NewRequest(&filesystem.CreateWatcherRequest{Path: "w"}))
	if err != nil {
		t.Fatal(err)
	}
	read := func() error {
		_, err := f.GetWatcherEvents(ctx, connect.NewRequest(&filesystem.GetWatcherEventsRequest{WatcherId: cw.Msg.WatcherId}))
		return err
	}
	// The sandbox sleeps: its journals' streams end, and a watch of it
	// is refused until it wakes.
	fail = api.Errorf(api.CodeConflict, "sandbox %s is asleep", sb.ID)
	ff.endWatches()
	if err := read(); connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Errorf("read while asleep: %v; want failed_precondition", err)
	}
	if _, err := plane.TerminateSandbox(t.Context(), "team_a", sb.ID); err != nil {
		t.Fatal(err)
	}
	if err := read(); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("read once terminated: %v; want not_found", err)
	}
	if n := f.watches[sb.ID]; n != 0 {
		t.Errorf("the terminated sandbox holds %d watches", n)
	}
	fail = nil
	if err := read(); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("the watcher came back: %v", err)
	}
	// A sandbox terminated while its journal's stream still lives: the
	// next read finds the watcher gone all the same.
	sb2, err := plane.CreateSandboxWith(t.Context(), "team_a", api.CreateSandboxRequest{}, lifecycle.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx2 := context.WithValue(t.Context(), targetKey{}, target{TeamID: "team_a", SandboxID: sb2.ID})
	cw2, err := f.CreateWatcher(ctx2, connect.NewRequest(&filesystem.CreateWatcherRequest{Path: "w"}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := plane.TerminateSandbox(t.Context(), "team_a", sb2.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := f.GetWatcherEvents(ctx2, connect.NewRequest(&filesystem.GetWatcherEventsRequest{WatcherId: cw2.Msg.WatcherId})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("read once terminated, its stream alive: %v; want not_found", err)
	}
	if n := f.watches[sb2.ID]; n != 0 {
		t.Errorf("the terminated sandbox holds %d watches", n)
	}
}

// TestWatcherSandboxEnded: a sandbox ending for good ends its watchers;
// one that may run again (asleep, waking) keeps them.
func TestWatcherSandboxEnded(t *testing.T) {
	plane := &fakePlane{now: time.Now}
	sb, err := plane.CreateSandboxWith(t.Context(), "team_a", api.CreateSandboxRequest{}, lifecycle.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w := &polledWatchers{sandboxes: plane}
	for state, want := range map[api.SandboxState]bool{
		api.StateRunning: false, api.StateAsleep: false, api.StateSleeping: false, api.StateWaking: false,
		api.StateTerminating: true, api.StateTerminated: true, api.StateFailed: true,
	} {
		plane.sandboxes[0].State = state
		if got := w.ended(t.Context(), target{TeamID: "team_a", SandboxID: sb.ID}); got != want {
			t.Errorf("%s: ended %v, want %v", state, got, want)
		}
	}
	if !w.ended(t.Context(), target{TeamID: "team_b", SandboxID: sb.ID}) {
		t.Error("a sandbox not found (another team's) did not end its watchers")
	}
}
