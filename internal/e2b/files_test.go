package e2b

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"path"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/files"
	"github.com/cove-dev/cove/internal/e2b/envd/filesystem"
	"github.com/cove-dev/cove/internal/e2b/envd/filesystem/filesystemconnect"
	"github.com/cove-dev/cove/internal/node"
)

// fakeFiles is a sandbox's files in memory, by absolute path; the sandbox
// each call names is recorded.
type fakeFiles struct {
	mu      sync.Mutex
	data    map[string]string
	dirs    map[string]bool
	xattrs  map[string]map[string]string // user.* extended attributes by path
	targets []files.Target
	// watches are fed by the test: each WatchFiles makes one.
	watches chan *fakeWatch
	// open are the watches change reports to; seq numbers their records.
	open []*fakeWatch
	seq  int64
}

// fakeWatch is a watch journal's reader whose records the test sends, or
// change makes.
type fakeWatch struct {
	dir       string
	recursive bool
	ch        chan api.FileEvent
	closed    chan struct{}
	once      sync.Once
	ended     bool // ch is closed (guarded by fakeFiles.mu)
}

func (w *fakeWatch) Next(ctx context.Context) (api.FileEvent, error) {
	// A record at hand is handed over first, as a journal's reader does.
	select {
	case ev, ok := <-w.ch:
		if !ok {
			return api.FileEvent{}, io.EOF
		}
		return ev, nil
	default:
	}
	select {
	case ev, ok := <-w.ch:
		if !ok {
			return api.FileEvent{}, io.EOF
		}
		return ev, nil
	case <-ctx.Done():
		return api.FileEvent{}, ctx.Err()
	}
}

func (w *fakeWatch) Close() { w.once.Do(func() { close(w.closed) }) }

func (f *fakeFiles) WatchFiles(_ context.Context, t files.Target, q files.WatchQuery) (node.FileWatch, error) {
	f.mu.Lock()
	f.note(t)
	e, err := f.entry(q.Path)
	if err == nil && e.Type != api.FileTypeDir {
		err = api.Errorf(api.CodeConflict, "%s is not a directory", q.Path)
	}
	var w *fakeWatch
	if err == nil {
		w = &fakeWatch{dir: q.Path, recursive: q.Recursive, ch: make(chan api.FileEvent, 256), closed: make(chan struct{})}
		f.open = append(f.open, w)
	}
	f.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if f.watches != nil {
		f.watches <- w
	}
	return w, nil
}

// change runs fn on the files (under f.mu) and reports what it changed
// to the open watches, as the node's journals would: a create (with the
// entry), write or remove record for each path, in path order; a watch
// whose directory went ends after its remove record.
func (f *fakeFiles) change(fn func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	snap := func() map[string]api.FileEntry {
		m := map[string]api.FileEntry{}
		for p := range f.data {
			m[p], _ = f.entry(p)
		}
		for p := range f.dirs {
			m[p], _ = f.entry(p)
		}
		return m
	}
	before := snap()
	fn()
	after := snap()
	var paths []string
	for p := range after {
		paths = append(paths, p)
	}
	for p := range before {
		if _, ok := after[p]; !ok {
			paths = append(paths, p)
		}
	}
	sort.Strings(paths)
	for _, p := range paths {
		old, had := before[p]
		cur, has := after[p]
		var ev api.FileEvent
		switch {
		case !has:
			ev = api.FileEvent{Type: api.FileRemove, Path: p}
		case !had:
			ev = api.FileEvent{Type: api.FileCreate, Path: p, Entry: &cur}
		case cur.Version != old.Version:
			ev = api.FileEvent{Type: api.FileWrite, Path: p, Entry: &cur}
		default:
			continue
		}
		for _, w := range f.open {
			rel, under := strings.CutPrefix(p, w.dir+"/")
			if w.ended || !(p == w.dir || under && (w.recursive || !strings.Contains(rel, "/"))) {
				continue
			}
			f.seq++
			ev.Seq = f.seq
			w.ch <- ev
			if p == w.dir && !has {
				w.ended = true
				close(w.ch)
			}
		}
	}
}

// endWatches ends every open watch's stream, as a sandbox that stops
// ends its journals.
func (f *fakeFiles) endWatches() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, w := range f.open {
		if !w.ended {
			w.ended = true
			close(w.ch)
		}
	}
}

func newFakeFiles() *fakeFiles {
	return &fakeFiles{data: map[string]string{}, xattrs: map[string]map[string]string{}, dirs: map[string]bool{"/": true, "/home": true, "/home/user": true, "/tmp": true}}
}

func (f *fakeFiles) note(t files.Target) {
	f.targets = append(f.targets, t)
}

func (f *fakeFiles) entry(p string) (api.FileEntry, error) {
	if d, ok := f.data[p]; ok {
		return api.FileEntry{Name: path.Base(p), Path: p, Type: api.FileTypeFile, Size: int64(len(d)), Mode: "0644", UID: 1000, GID: 1000, Version: d, Xattrs: f.xattrs[p]}, nil
	}
	if f.dirs[p] {
		return api.FileEntry{Name: path.Base(p), Path: p, Type: api.FileTypeDir, Mode: "0755", UID: 1000, GID: 1000}, nil
	}
	return api.FileEntry{}, api.Errorf(api.CodeNotFound, "%s does not exist", p)
}

func (f *fakeFiles) StatFile(_ context.Context, t files.Target, p string) (api.FileEntry, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.note(t)
	return f.entry(p)
}

func (f *fakeFiles) ListFiles(_ context.Context, t files.Target, q files.ListQuery) (api.List[api.FileEntry], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.note(t)
	var out api.List[api.FileEntry]
	all := []string{}
	for p := range f.data {
		all = append(all, p)
	}
	for p := range f.dirs {
		all = append(all, p)
	}
	sort.Sort(sort.Reverse(sort.StringSlice(all))) // the order envd's walk does not have
	for _, p := range all {
		rel, ok := strings.CutPrefix(p, q.Path+"/")
		if ok && strings.Count(rel, "/") < q.Depth {
			e, _ := f.entry(p)
			out.Items = append(out.Items, e)
		}
	}
	return out, nil
}

func (f *fakeFiles) ReadFile(_ context.Context, t files.Target, req node.ReadSpec) (*node.Content, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.note(t)
	d, ok := f.data[req.Path]
	if !ok {
		return nil, api.Errorf(api.CodeNotFound, "%s does not exist", req.Path)
	}
	return &node.Content{Status: 200, ContentLength: int64(len(d)), Body: io.NopCloser(strings.NewReader(d))}, nil
}

func (f *fakeFiles) WriteFile(_ context.Context, t files.Target, req files.WriteRequest, body io.Reader) (api.FileEntry, bool, error) {
	b, err := io.ReadAll(body)
	if err != nil {
		return api.FileEntry{}, false, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.note(t)
	if !f.dirs[path.Dir(req.Path)] {
		return api.FileEntry{}, false, api.Errorf(api.CodeNotFound, "no directory %s", path.Dir(req.Path))
	}
	f.data[req.Path] = string(b)
	f.xattrs[req.Path] = req.Xattrs // a new inode: only the write's
	e, _ := f.entry(req.Path)
	return e, true, nil
}

func (f *fakeFiles) Mkdir(_ context.Context, t files.Target, req api.MkdirRequest, user string) (api.FileEntry, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.note(t)
	for p := req.Path; p != "/"; p = path.Dir(p) {
		f.dirs[p] = true
	}
	return f.entry(req.Path)
}

func (f *fakeFiles) MoveFile(_ context.Context, t files.Target, req api.MoveRequest, user string) (api.FileEntry, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.note(t)
	d, ok := f.data[req.From]
	if !ok {
		return api.FileEntry{}, api.Errorf(api.CodeNotFound, "%s does not exist", req.From)
	}
	delete(f.data, req.From)
	f.data[req.To] = d
	f.xattrs[req.To] = f.xattrs[req.From]
	delete(f.xattrs, req.From)
	return f.entry(req.To)
}

func (f *fakeFiles) RemoveFile(_ context.Context, t files.Target, p string, recursive bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.note(t)
	if _, ok := f.data[p]; !ok {
		return api.Errorf(api.CodeNotFound, "%s does not exist", p)
	}
	delete(f.data, p)
	return nil
}

func (h *harness) filesRequest(method, query, token string, hdr http.Header, body io.Reader) (*http.Response, string) {
	h.t.Helper()
	req, _ := http.NewRequest(method, h.side.URL+"/files?"+query, body)
	for k, v := range hdr {
		req.Header[k] = v
	}
	req.Header.Set("E2b-Sandbox-Id", h.plane.sandboxes[0].ID)
	req.Header.Set("X-Access-Token", token)
	resp, err := http.DefaultTransport.RoundTrip(req) // no transparent gzip: the test reads what was sent
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// TestFilesAPI: uploads raw, gzip and multipart (file names are paths,
// slashes kept, relative to the user's home), downloads plain and gzip,
// and errors in E2B's shape; every call is for the token's sandbox.
func TestFilesAPI(t *testing.T) {
	h := newHarness(t)
	sb := h.create("key-a", map[string]any{"templateID": "base"})
	tok := sb.EnvdAccessToken
	octet := http.Header{"Content-Type": {"application/octet-stream"}}

	resp, body := h.filesRequest("POST", "path=notes/a.txt", tok, octet, strings.NewReader("raw bytes"))
	var up []uploadEntry
	json.Unmarshal([]byte(body), &up)
	if resp.StatusCode != 200 || len(up) != 1 || up[0].Path != "/home/user/notes/a.txt" || up[0].Type != "file" {
		t.Fatalf("raw upload: %d %s", resp.StatusCode, body)
	}
	var zb bytes.Buffer
	zw := gzip.NewWriter(&zb)
	zw.Write([]byte("zipped up"))
	zw.Close()
	gz := http.Header{"Content-Type": {"application/octet-stream"}, "Content-Encoding": {"gzip"}}
	if resp, body := h.filesRequest("POST", "path=/tmp/z.txt", tok, gz, &zb); resp.StatusCode != 200 {
		t.Fatalf("gzip upload: %d %s", resp.StatusCode, body)
	}
	var mb bytes.Buffer
	mw := multipart.NewWriter(&mb)
	for name, data := range map[string]string{"deep/er/one.txt": "1", "/tmp/two.txt": "2"} {
		ph := textproto.MIMEHeader{}
		ph.Set("Content-Disposition", `form-data; name="file"; filename="`+name+`"`)
		w, _ := mw.CreatePart(ph)
		w.Write([]byte(data))
	}
	mw.Close()
	if resp, body := h.filesRequest("POST", "", tok, http.Header{"Content-Type": {mw.FormDataContentType()}}, &mb); resp.StatusCode != 200 ||
		!strings.Contains(body, `"/home/user/deep/er/one.txt"`) || !strings.Contains(body, `"/tmp/two.txt"`) {
		t.Fatalf("multipart upload: %d %s", resp.StatusCode, body)
	}
	for p, want := range map[string]string{
		"/home/user/notes/a.txt": "raw bytes", "/tmp/z.txt": "zipped up", "/home/user/deep/er/one.txt": "1", "/tmp/two.txt": "2",
	} {
		if got := h.files.data[p]; got != want {
			t.Errorf("%s holds %q; want %q", p, got, want)
		}
	}

	if resp, body := h.filesRequest("GET", "path=notes/a.txt", tok, nil, nil); resp.StatusCode != 200 || body != "raw bytes" {
		t.Errorf("download: %d %q", resp.StatusCode, body)
	}
	resp, body = h.filesRequest("GET", "path=/tmp/z.txt", tok, http.Header{"Accept-Encoding": {"gzip"}}, nil)
	zr, err := gzip.NewReader(strings.NewReader(body))
	if err != nil || resp.Header.Get("Content-Encoding") != "gzip" {
		t.Fatalf("gzip download: %d %v %v", resp.StatusCode, resp.Header, err)
	}
	if b, _ := io.ReadAll(zr); string(b) != "zipped up" {
		t.Errorf("gzip download holds %q", b)
	}
	for _, tc := range []struct {
		query string
		code  int
	}{{"path=missing.txt", 404}, {"path=/home/user", 400}, {"path=a.txt&username=mallory", 401}} {
		resp, body := h.filesRequest("GET", tc.query, tok, nil, nil)
		var e errorBody
		json.Unmarshal([]byte(body), &e)
		if resp.StatusCode != tc.code || e.Code != tc.code {
			t.Errorf("GET %s: %d %s; want %d", tc.query, resp.StatusCode, body, tc.code)
		}
	}
	if resp, _ := h.filesRequest("GET", "path=notes/a.txt", "", nil, nil); resp.StatusCode != 401 {
		t.Errorf("a download without the token: %d", resp.StatusCode)
	}
	for _, target := range h.files.targets {
		if target.TeamID != "a" || target.Ref != sb.SandboxID || target.Wake {
			t.Errorf("a file call for %+v", target)
		}
	}
}

// TestFilesystem: envd's filesystem calls over the fake, with entries as
// envd describes them, lists in its walk's order and its error codes.
func TestFilesystem(t *testing.T) {
	h := newHarness(t)
	sb := h.create("key-a", map[string]any{"templateID": "base"})
	hdr := http.Header{"E2b-Sandbox-Id": {sb.SandboxID}, "X-Access-Token": {sb.EnvdAccessToken}}
	c := filesystemconnect.NewFilesystemClient(&http.Client{Transport: withHeaders{hdr}}, h.side.URL, connect.WithProtoJSON())
	ctx := t.Context()
	for _, p := range []string{"b", "a/z", "a/c/d", "a.txt"} {
		if _, err := c.MakeDir(ctx, connect.NewRequest(&filesystem.MakeDirRequest{Path: p})); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.MakeDir(ctx, connect.NewRequest(&filesystem.MakeDirRequest{Path: "b"})); connect.CodeOf(err) != connect.CodeAlreadyExists {
		t.Errorf("a second makeDir: %v; want already_exists", err)
	}
	h.files.data["/home/user/a/file"] = "12345"
	l, err := c.ListDir(ctx, connect.NewRequest(&filesystem.ListDirRequest{Path: "/home/user", Depth: 3}))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range l.Msg.Entries {
		got = append(got, strings.TrimPrefix(e.Path, "/home/user/"))
	}
	if want := "a a/c a/c/d a/file a/z a.txt b"; strings.Join(got, " ") != want {
		t.Errorf("list: %s; want %s", strings.Join(got, " "), want)
	}
	st, err := c.Stat(ctx, connect.NewRequest(&filesystem.StatRequest{Path: "a/file"}))
	if err != nil {
		t.Fatal(err)
	}
	e := st.Msg.Entry
	if e.Type != filesystem.FileType_FILE_TYPE_FILE || e.Size != 5 || e.Mode != 0o644 || e.Permissions != "-rw-r--r--" ||
		e.Owner != "user" || e.Group != "user" || e.Path != "/home/user/a/file" {
		t.Errorf("stat: %v", e)
	}
	if _, err := c.Move(ctx, connect.NewRequest(&filesystem.MoveRequest{Source: "a/file", Destination: "/tmp/moved"})); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Remove(ctx, connect.NewRequest(&filesystem.RemoveRequest{Path: "/tmp/moved"})); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Stat(ctx, connect.NewRequest(&filesystem.StatRequest{Path: "/tmp/moved"})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("a removed file: %v; want not_found", err)
	}
	// Removing what is not there succeeds, as envd's does.
	if _, err := c.Remove(ctx, connect.NewRequest(&filesystem.RemoveRequest{Path: "/tmp/moved"})); err != nil {
		t.Errorf("remove a missing file: %v", err)
	}
}

func TestEntryInfo(t *testing.T) {
	mtime := time.Unix(1700000000, 0)
	for _, tc := range []struct {
		in          api.FileEntry
		perm, owner string
		target      string
	}{
		{api.FileEntry{Path: "/home/user/x", Type: api.FileTypeFile, Mode: "0640", UID: 1000, GID: 0, MTime: mtime}, "-rw-r-----", "user", ""},
		{api.FileEntry{Path: "/home/user/d", Type: api.FileTypeDir, Mode: "0755", UID: 0, GID: 0}, "drwxr-xr-x", "root", ""},
		{api.FileEntry{Path: "/home/user/l", Type: api.FileTypeSymlink, Mode: "0777", UID: 1000, GID: 1000, Target: "../x"}, "lrwxrwxrwx", "user", "/home/x"},
		{api.FileEntry{Path: "/l", Type: api.FileTypeSymlink, Mode: "0777", UID: 5, GID: 5, Target: "/etc/hostname"}, "lrwxrwxrwx", "5", "/etc/hostname"},
	} {
		e := entryInfo(tc.in)
		if e.Permissions != tc.perm || e.Owner != tc.owner || e.GetSymlinkTarget() != tc.target {
			t.Errorf("%+v: %v", tc.in, e)
		}
	}
	for in, want := range map[string]string{"": "/home/user", "a/../b": "/home/user/b", "/etc/x": "/etc/x", "../../etc": "/etc"} {
		if got := absPath("user", in); got != want {
			t.Errorf("absPath(%q) = %q; want %q", in, got, want)
		}
	}
	if got := absPath("root", "x"); got != "/root/x" {
		t.Errorf("root's relative path: %s", got)
	}
}

// TestWatchDir: a watch starts with a start event, then reports the
// records of the directory's watch journal, as envd's events named
// relative to the directory (a dropped record has none), until the client
// stops.
func TestWatchDir(t *testing.T) {
	h := newHarness(t)
	sb := h.create("key-a", map[string]any{"templateID": "base"})
	hdr := http.Header{"E2b-Sandbox-Id": {sb.SandboxID}, "X-Access-Token": {sb.EnvdAccessToken}}
	c := filesystemconnect.NewFilesystemClient(&http.Client{Transport: withHeaders{hdr}}, h.side.URL, connect.WithProtoJSON())
	h.files.dirs["/home/user/w"] = true
	h.files.watches = make(chan *fakeWatch, 1)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	st, err := c.WatchDir(ctx, connect.NewRequest(&filesystem.WatchDirRequest{Path: "w", Recursive: true}))
	if err != nil {
		t.Fatal(err)
	}
	if !st.Receive() || st.Msg().GetStart() == nil {
		t.Fatalf("first event %v, %v; want start", st.Msg(), st.Err())
	}
	w := <-h.files.watches
	for _, ev := range []api.FileEvent{
		{Seq: 1, Type: api.FileCreate, Path: "/home/user/w/sub"},
		{Seq: 2, Type: api.FileCreate, Path: "/home/user/w/sub/f.txt"},
		{Seq: 3, Type: api.FileDropped, Count: 4},
		{Seq: 4, Type: api.FileWrite, Path: "/home/user/w/sub/f.txt"},
		{Seq: 5, Type: api.FileRename, Path: "/home/user/w/sub/f.txt"},
		{Seq: 6, Type: api.FileCreate, Path: "/home/user/w/g", Entry: &api.FileEntry{Path: "/home/user/w/g", Type: api.FileTypeFile, Size: 2}},
	} {
		w.ch <- ev
	}
	var got []string
	for len(got) < 6 && st.Receive() {
		if fe := st.Msg().GetFilesystem(); fe != nil {
			got = append(got, fe.Type.String()+":"+fe.Name)
		}
	}
	if want := "EVENT_TYPE_CREATE:sub EVENT_TYPE_CREATE:sub/f.txt EVENT_TYPE_WRITE:sub/f.txt EVENT_TYPE_RENAME:sub/f.txt EVENT_TYPE_CREATE:g EVENT_TYPE_WRITE:g"; strings.Join(got, " ") != want {
		t.Errorf("events %v (%v); want %s", got, st.Err(), want)
	}
	cancel()
	st.Close()
	missing, err := c.WatchDir(t.Context(), connect.NewRequest(&filesystem.WatchDirRequest{Path: "missing"}))
	if err != nil {
		t.Fatal(err)
	}
	if missing.Receive() || connect.CodeOf(missing.Err()) != connect.CodeNotFound {
		t.Errorf("watch a missing directory: %v; want not_found", missing.Err())
	}
	missing.Close()
}

// TestWatchBounds: a sandbox has at most maxWatches watches open (another
// sandbox's are its own), and a slot comes back when a watch ends.
func TestWatchBounds(t *testing.T) {
	f := &fsService{}
	var releases []func()
	for range maxWatches {
		r, err := f.watchSlot("sbx_a")
		if err != nil {
			t.Fatal(err)
		}
		releases = append(releases, r)
	}
	if _, err := f.watchSlot("sbx_a"); connect.CodeOf(err) != connect.CodeResourceExhausted {
		t.Errorf("watch %d: %v; want resource_exhausted", maxWatches+1, err)
	}
	if r, err := f.watchSlot("sbx_b"); err != nil {
		t.Errorf("another sandbox's first watch: %v", err)
	} else {
		r()
	}
	releases[0]()
	if _, err := f.watchSlot("sbx_a"); err != nil {
		t.Errorf("a watch after one ended: %v", err)
	}
}
