// Package watches runs `cove serve` and checks file watches on real
// sandboxes (runc, inotify in the sandbox's agent): a recursive watch
// covers directories made after it started, a reader that comes back
// with after= misses nothing, a flood is bounded and counted, another
// team cannot watch, and nothing in the sandbox, user or root, can make a
// watch report anything but the sandbox's own paths.
package watches

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
	cove "github.com/cove-dev/cove/sdk/go"
)

func TestMain(m *testing.M) { e2etest.Main(m) }

// stream is one raw watch connection: its response arrives once the
// sandbox's agent watches the directory.
type stream struct {
	t    *testing.T
	resp *http.Response
	r    *bufio.Reader
	sse  bool
}

func openWatch(t *testing.T, s *e2etest.Server, key, ref, path string, recursive bool, after int64, accept string) (*stream, int, []byte) {
	t.Helper()
	q := url.Values{"path": {path}, "recursive": {strconv.FormatBool(recursive)}}
	if after > 0 {
		q.Set("after", strconv.FormatInt(after, 10))
	}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, s.URL+"/v1/sandboxes/"+ref+"/files/watch?"+q.Encode(), nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return nil, resp.StatusCode, b
	}
	st := &stream{t: t, resp: resp, r: bufio.NewReader(resp.Body), sse: accept == "text/event-stream"}
	t.Cleanup(func() { resp.Body.Close() })
	return st, resp.StatusCode, nil
}

func (s *stream) close() { s.resp.Body.Close() }

// next returns the next record (skipping keepalives).
func (s *stream) next() api.FileEvent {
	s.t.Helper()
	var id string
	for {
		line, err := s.r.ReadString('\n')
		if err != nil {
			s.t.Fatalf("watch stream ended: %v", err)
		}
		line = strings.TrimRight(line, "\r\n")
		if s.sse {
			switch {
			case strings.HasPrefix(line, "id: "):
				id = strings.TrimPrefix(line, "id: ")
				continue
			case strings.HasPrefix(line, "data: "):
				line = strings.TrimPrefix(line, "data: ")
			default:
				continue
			}
		}
		if line == "" {
			continue
		}
		var ev api.FileEvent
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			s.t.Fatalf("bad record %q: %v", line, err)
		}
		if s.sse && id != strconv.FormatInt(ev.Seq, 10) {
			s.t.Fatalf("SSE id %q for record %+v", id, ev)
		}
		return ev
	}
}

// until reads records until one matches; it returns them all.
func (s *stream) until(match func(api.FileEvent) bool) []api.FileEvent {
	s.t.Helper()
	var seen []api.FileEvent
	for {
		ev := s.next()
		seen = append(seen, ev)
		if match(ev) {
			return seen
		}
	}
}

func written(p string, size int64) func(api.FileEvent) bool {
	return func(ev api.FileEvent) bool {
		return ev.Path == p && ev.Entry != nil && ev.Entry.Size == size
	}
}

// TestRecursiveWatchAndResume: a recursive watch sees a file written in a
// directory made after it started; a reader that left comes back with
// after= and gets every record since, numbered without a gap, through the
// Go SDK too.
func TestRecursiveWatchAndResume(t *testing.T) {
	s := e2etest.StartServer(t)
	c := s.Admin
	sb := e2etest.Create(t, c, api.CreateSandboxRequest{})

	w, code, body := openWatch(t, s, s.AdminKey, sb.ID, "/workspace", true, 0, "text/event-stream")
	if w == nil {
		t.Fatalf("watch: %d %s", code, body)
	}
	e2etest.MustOK(t, c, sb.ID, "mkdir -p /workspace/new/deep && printf hello > /workspace/new/deep/f.txt")
	seen := w.until(written("/workspace/new/deep/f.txt", 5))
	var mkdir api.FileEvent
	for _, ev := range seen {
		if ev.Type == api.FileCreate && ev.Path == "/workspace/new" {
			mkdir = ev
		}
		if !strings.HasPrefix(ev.Path, "/workspace/") {
			t.Errorf("record outside the watch: %+v", ev)
		}
	}
	if mkdir.Seq == 0 || mkdir.Entry == nil || mkdir.Entry.Type != api.FileTypeDir || mkdir.Entry.UID != 1000 {
		t.Fatalf("no create of /workspace/new with its entry in %+v", seen)
	}
	last := seen[len(seen)-1].Seq
	w.close()

	// Away: two more writes.
	e2etest.MustOK(t, c, sb.ID, "printf a > /workspace/x1 && printf bb > /workspace/new/x2")

	// Back through the SDK, after the last record read.
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	errDone := errors.New("done")
	var got []api.FileEvent
	err := c.WatchFiles(ctx, sb.ID, cove.WatchQuery{Path: "/workspace", Recursive: true, After: last}, func(ev api.FileEvent) error {
		got = append(got, ev)
		if written("/workspace/new/x2", 2)(ev) {
			return errDone
		}
		return nil
	})
	if !errors.Is(err, errDone) {
		t.Fatalf("resumed watch: %v (got %+v)", err, got)
	}
	for i, ev := range got {
		if ev.Seq != last+int64(i)+1 || ev.Type == api.FileDropped {
			t.Fatalf("resumed record %d: %+v, want seq %d and no loss", i, ev, last+int64(i)+1)
		}
	}
	if !containsWrite(got, "/workspace/x1", 1) {
		t.Errorf("the write made while away is missing: %+v", got)
	}

	// From further back, NDJSON: the same records again, from mkdir on.
	w, _, _ = openWatch(t, s, s.AdminKey, sb.ID, "/workspace", true, mkdir.Seq-1, "application/x-ndjson")
	if ev := w.next(); ev.Seq != mkdir.Seq || ev.Path != "/workspace/new" {
		t.Errorf("resume from before mkdir: %+v, want %+v", ev, mkdir)
	}
	w.close()
}

func containsWrite(evs []api.FileEvent, p string, size int64) bool {
	for _, ev := range evs {
		if written(p, size)(ev) {
			return true
		}
	}
	return false
}

// TestFloodIsBounded: a flood of writes comes out at most at the watch's
// rate, the rest counted in dropped records: every file is accounted for,
// as a record or in a count.
func TestFloodIsBounded(t *testing.T) {
	s := e2etest.StartServer(t)
	c := s.Admin
	sb := e2etest.Create(t, c, api.CreateSandboxRequest{})
	e2etest.MustOK(t, c, sb.ID, "mkdir /workspace/flood")
	w, code, body := openWatch(t, s, s.AdminKey, sb.ID, "/workspace/flood", false, 0, "")
	if w == nil {
		t.Fatalf("watch: %d %s", code, body)
	}
	const files = 5000
	e2etest.MustOK(t, c, sb.ID, fmt.Sprintf("cd /workspace/flood && for i in $(seq 1 %d); do echo x > f$i; done", files))
	// End markers, one every 1.5 s until one is read: one comes in a
	// second of its own once the journal has taken the flood, so the rate
	// lets it through, however long that takes.
	seen := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-seen:
				return
			case <-time.After(1500 * time.Millisecond):
			}
			c.ExecWait(t.Context(), sb.ID, api.CreateCommandRequest{Command: fmt.Sprintf("echo end > /workspace/flood/zz-end-%d", i)})
		}
	})
	var events, dropped, drops int64
	w.until(func(ev api.FileEvent) bool {
		if ev.Type == api.FileDropped {
			dropped += ev.Count
			drops++
		} else {
			events++
		}
		return strings.HasPrefix(ev.Path, "/workspace/flood/zz-end-")
	})
	close(seen)
	wg.Wait()
	t.Logf("%d records, %d dropped in %d records", events, dropped, drops)
	if dropped == 0 {
		t.Fatalf("a flood of %d files came through unbounded: %d records, none dropped", files, events)
	}
	if events+dropped < 2*files {
		t.Errorf("%d records and %d dropped for %d files created and written: events lost silently", events, dropped, files)
	}
}

// TestWatchBoundaries: another team gets 404; a watch of a symlink to the
// kernel's view of the agent's root, of a host-looking path, or of /proc
// is refused; a recursive watch does not follow symlinks out of its tree,
// as user or root; records name only the sandbox's paths.
func TestWatchBoundaries(t *testing.T) {
	s := e2etest.StartServer(t)
	c := s.Admin
	sb := e2etest.Create(t, c, api.CreateSandboxRequest{})

	other := s.NewTeam("watch-other")
	err := other.WatchFiles(t.Context(), sb.ID, cove.WatchQuery{Path: "/workspace"}, func(api.FileEvent) error { return nil })
	if api.ErrorCode(err) != api.CodeNotFound {
		t.Errorf("another team's watch: %v, want not_found", err)
	}
	if _, code, _ := openWatch(t, s, s.AdminKey, sb.ID, "workspace", false, 0, ""); code != http.StatusBadRequest {
		t.Errorf("relative path: %d", code)
	}

	e2etest.MustOK(t, c, sb.ID, "ln -s /proc/1/root /workspace/p1 && ln -s "+s.DataDir+" /workspace/hostdir && ln -s /etc /workspace/etc-link && mkdir -p /workspace/tree")
	e2etest.MustOK(t, c, sb.ID, "ln -s /proc/self/root /root/pr && ln -s / /workspace/tree/root-link && ln -s /root /workspace/tree/root-home", e2etest.AsRoot)
	for _, p := range []string{"/workspace/p1", "/root/pr", "/proc/1/root", "/proc", "/sys", "/dev", "/.cove"} {
		if w, code, body := openWatch(t, s, s.AdminKey, sb.ID, p, true, 0, ""); w != nil {
			t.Errorf("watch of %s accepted", p)
			w.close()
		} else if code == http.StatusOK || code >= 500 {
			t.Errorf("watch of %s: %d %s", p, code, body)
		}
	}
	if _, code, body := openWatch(t, s, s.AdminKey, sb.ID, "/workspace/hostdir", true, 0, ""); code != http.StatusNotFound {
		t.Errorf("watch of a symlink to the host's data directory: %d %s, want 404 (no such path in the sandbox)", code, body)
	}

	w, code, body := openWatch(t, s, s.AdminKey, sb.ID, "/workspace", true, 0, "")
	if w == nil {
		t.Fatalf("watch: %d %s", code, body)
	}
	e2etest.MustOK(t, c, sb.ID, "echo x > /etc/watched-outside && echo y > /root/home-outside && echo z > /tmp/outside", e2etest.AsRoot)
	e2etest.MustOK(t, c, sb.ID, "echo mine > /workspace/tree/mine")
	seen := w.until(func(ev api.FileEvent) bool { return ev.Path == "/workspace/tree/mine" && ev.Type == api.FileWrite })
	for _, ev := range seen {
		if !strings.HasPrefix(ev.Path, "/workspace/") || strings.Contains(ev.Path, "outside") || strings.Contains(ev.Path, s.DataDir) {
			t.Errorf("record outside the sandbox's watched tree: %+v", ev)
		}
	}

	// Through a symlink: records name the path as asked.
	e2etest.MustOK(t, c, sb.ID, "mkdir -p /workspace/real && ln -s /workspace/real /workspace/alias")
	w, _, _ = openWatch(t, s, s.AdminKey, sb.ID, "/workspace/alias", false, 0, "")
	e2etest.MustOK(t, c, sb.ID, "echo a > /workspace/real/a")
	if ev := w.next(); ev.Path != "/workspace/alias/a" {
		t.Errorf("watch through a symlink: %+v", ev)
	}
}

// TestWatchStreamsPerTeam: a team holds at most
// --max-watch-streams-per-team watch streams over all its sandboxes; one
// more is 429 resource_exhausted with Retry-After in API.md's error
// format, while another team still opens its own; closing one frees a
// slot.
func TestWatchStreamsPerTeam(t *testing.T) {
	const limit = 3
	s := e2etest.StartServer(t, e2etest.WithArgs("--max-watch-streams-per-team", strconv.Itoa(limit)))
	teamKey := func(name string) string {
		r, err := s.Admin.CreateTeam(t.Context(), name)
		if err != nil {
			t.Fatal(err)
		}
		return r.APIKey
	}
	a, b := teamKey("watch-cap-a"), teamKey("watch-cap-b")
	ca, cb := cove.New(s.URL, a), cove.New(s.URL, b)
	a1, a2 := e2etest.Create(t, ca, api.CreateSandboxRequest{}), e2etest.Create(t, ca, api.CreateSandboxRequest{})
	b1 := e2etest.Create(t, cb, api.CreateSandboxRequest{})
	// The teams are the test's own, not the server's to clean up: their
	// sandboxes end before the server stops.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, x := range []struct {
			c  *cove.Client
			id string
		}{{ca, a1.ID}, {ca, a2.ID}, {cb, b1.ID}} {
			if _, err := x.c.TerminateSandbox(ctx, x.id); err != nil {
				t.Errorf("terminate %s: %v", x.id, err)
			}
		}
	})

	var open []*stream
	for _, ref := range []string{a1.ID, a1.ID, a2.ID} {
		w, code, body := openWatch(t, s, a, ref, "/workspace", false, 0, "")
		if w == nil {
			t.Fatalf("stream %d: %d %s, want 200", len(open)+1, code, body)
		}
		open = append(open, w)
	}
	// One more, of either sandbox, is refused, saying why and when to
	// retry.
	q := url.Values{"path": {"/workspace"}}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, s.URL+"/v1/sandboxes/"+a2.ID+"/files/watch?"+q.Encode(), nil)
	req.Header.Set("Authorization", "Bearer "+a)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode == http.StatusOK {
		resp.Body.Close() // an endless stream: a bound not kept
		t.Fatalf("stream %d of the team opened; want 429", limit+1)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var e api.ErrorResponse
	if resp.StatusCode != http.StatusTooManyRequests || json.Unmarshal(body, &e) != nil || e.Error.Code != api.CodeResourceExhausted || e.Error.Message == "" {
		t.Fatalf("stream %d: %d %s, want 429 resource_exhausted", limit+1, resp.StatusCode, body)
	}
	if ra := resp.Header.Get("Retry-After"); ra == "" {
		t.Error("the refusal has no Retry-After")
	}
	// Another team's streams are its own.
	if w, code, body := openWatch(t, s, b, b1.ID, "/workspace", false, 0, ""); w == nil {
		t.Fatalf("another team's stream: %d %s, want 200", code, body)
	}
	// Closing one frees its slot, once the server has seen it close.
	open[0].close()
	for {
		w, code, body := openWatch(t, s, a, a2.ID, "/workspace", false, 0, "")
		if w != nil {
			break
		}
		if code != http.StatusTooManyRequests {
			t.Fatalf("after a stream closed: %d %s", code, body)
		}
		select {
		case <-t.Context().Done():
			t.Fatal("no slot came free")
		case <-time.After(20 * time.Millisecond):
		}
	}
}
