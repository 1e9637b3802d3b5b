package httpapi

// The HTTP layer tested whole over a fake control plane: a real HTTP
// server serving the handler, and the Go SDK (or raw net/http, where a
// status or header is the point) pointed at it.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/files"
	"github.com/cove-dev/cove/internal/control/lifecycle"
	"github.com/cove-dev/cove/internal/node"
	cove "github.com/cove-dev/cove/sdk/go"
)

// testServer is the API served over a fake, with an SDK client holding
// team A's key.
type testServer struct {
	h      *Handler
	url    string
	fake   *fakeControlPlane
	client *cove.Client
	logs   *syncBuffer
}

func newTestServer(t *testing.T) *testServer {
	t.Helper()
	f := newFake()
	logs := &syncBuffer{}
	h := newHandler(f, slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &testServer{h: h, url: srv.URL, fake: f, client: cove.New(srv.URL, keyA), logs: logs}
}

// do sends a raw request with team A's key and returns the answer with
// its body read. A header given as "" is removed.
func (s *testServer) do(t *testing.T, method, path string, header map[string]string, body io.Reader) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, s.url+path, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+keyA)
	for k, v := range header {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return resp, b
}

// wantError checks an answer is an error of API.md's format with the
// status and code given.
func wantError(t *testing.T, resp *http.Response, body []byte, status int, code api.Code) api.Error {
	t.Helper()
	if resp.StatusCode != status {
		t.Fatalf("%s %s answered %d; want %d (body %s)", resp.Request.Method, resp.Request.URL.Path, resp.StatusCode, status, body)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("error Content-Type is %q; want application/json", ct)
	}
	var raw map[string]map[string]json.RawMessage
	if err := json.Unmarshal(body, &raw); err != nil || len(raw) != 1 || raw["error"] == nil {
		t.Fatalf("error body %s is not {\"error\": {...}} (%v)", body, err)
	}
	for k := range raw["error"] {
		if k != "code" && k != "message" && k != "details" {
			t.Errorf("error body %s has field %q beyond code, message, details", body, k)
		}
	}
	var e api.ErrorResponse
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatalf("error body %s: %v", body, err)
	}
	if e.Error.Code != code {
		t.Errorf("error code is %q; want %q (body %s)", e.Error.Code, code, body)
	}
	if e.Error.Message == "" {
		t.Errorf("error body %s has no message", body)
	}
	return *e.Error
}

func wantCode(t *testing.T, err error, code api.Code) {
	t.Helper()
	if got := api.ErrorCode(err); got != code {
		t.Fatalf("error %v has code %q; want %q", err, got, code)
	}
}

func wantNoCalls(t *testing.T, f *fakeControlPlane) {
	t.Helper()
	if calls := f.Calls(); len(calls) > 0 {
		t.Fatalf("the control plane was called: %+v", calls)
	}
}

func last(t *testing.T, f *fakeControlPlane, method string) call {
	t.Helper()
	c, ok := f.Last(method)
	if !ok {
		t.Fatalf("%s was not called; calls: %+v", method, f.Calls())
	}
	return c
}

func ptr[T any](v T) *T { return &v }

// syncBuffer is a log sink the server writes while the test reads.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestHealthz(t *testing.T) {
	s := newTestServer(t)
	s.fake.WarmPoolFn = func() (int, int) { return 2, 3 }
	h, err := cove.New(s.url, "").Health(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if h.Status != "ok" || h.WarmPool.Ready != 2 || h.WarmPool.Target != 3 || h.Listeners != nil {
		t.Fatalf("health is %+v; want ok with 2 of 3 warm and no listeners", h)
	}
}

func TestHealthzListeners(t *testing.T) {
	f := newFake()
	h := newHandler(f, slog.New(slog.DiscardHandler))
	want := map[string]string{"api": "127.0.0.1:41234", "gateway": "0.0.0.0:40001", "dns": "0.0.0.0:40002"}
	h.ReportListeners(want)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	got, err := cove.New(srv.URL, "").Health(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(got.Listeners, want) {
		t.Fatalf("listeners = %v, want %v", got.Listeners, want)
	}
}

func TestAuthRefused(t *testing.T) {
	tests := []struct {
		name, auth, path string
	}{
		{"no header", "", "/v1/sandboxes"},
		{"not bearer", "Basic " + keyA, "/v1/sandboxes"},
		{"empty bearer", "Bearer  ", "/v1/sandboxes"},
		{"unknown key", "Bearer cove_nope", "/v1/sandboxes"},
		{"unknown key on a sandbox", "Bearer cove_nope", "/v1/sandboxes/web/files/content?path=/a"},
		{"no key on an unknown route", "", "/v1/nope"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newTestServer(t)
			resp, body := s.do(t, http.MethodGet, tt.path, map[string]string{"Authorization": tt.auth}, nil)
			wantError(t, resp, body, http.StatusUnauthorized, api.CodeUnauthenticated)
			wantNoCalls(t, s.fake)
		})
	}
	t.Run("sdk", func(t *testing.T) {
		s := newTestServer(t)
		for _, key := range []string{"", "cove_nope"} {
			_, err := cove.New(s.url, key).ListSandboxes(t.Context(), cove.SandboxQuery{})
			wantCode(t, err, api.CodeUnauthenticated)
			_, err = cove.New(s.url, key).GetSandbox(t.Context(), "web")
			wantCode(t, err, api.CodeUnauthenticated)
		}
		wantNoCalls(t, s.fake)
	})
	t.Run("unknown route with a key", func(t *testing.T) {
		s := newTestServer(t)
		resp, body := s.do(t, http.MethodGet, "/v1/nope", nil, nil)
		wantError(t, resp, body, http.StatusNotFound, api.CodeNotFound)
	})
	t.Run("scheme in any case", func(t *testing.T) {
		s := newTestServer(t)
		for _, scheme := range []string{"bearer", "BEARER", "Bearer"} {
			resp, body := s.do(t, http.MethodGet, "/v1/sandboxes", map[string]string{"Authorization": scheme + " " + keyA}, nil)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("%s: status %d: %s", scheme, resp.StatusCode, body)
			}
		}
	})
}

// TestPrincipalTeamReachesControlPlane checks that every call acts for the
// team of the key it came with, and for no other.
func TestPrincipalTeamReachesControlPlane(t *testing.T) {
	s := newTestServer(t)
	c := cove.New(s.url, keyB)
	type fn = func(ctx context.Context) error
	ignore := func(_ any, err error) error { return err }
	tests := []struct {
		method string
		call   fn
	}{
		{"CreateSandbox", func(ctx context.Context) error {
			return ignore(c.CreateSandbox(ctx, api.CreateSandboxRequest{}, false))
		}},
		{"GetSandbox", func(ctx context.Context) error { return ignore(c.GetSandbox(ctx, "web")) }},
		{"WaitSandbox", func(ctx context.Context) error {
			return ignore(c.WaitSandbox(ctx, "web", api.StateRunning, time.Second))
		}},
		{"ListSandboxes", func(ctx context.Context) error { return ignore(c.ListSandboxes(ctx, cove.SandboxQuery{})) }},
		{"UpdateSandbox", func(ctx context.Context) error {
			return ignore(c.UpdateSandbox(ctx, "web", api.UpdateSandboxRequest{Labels: map[string]string{"a": "b"}}))
		}},
		{"TerminateSandbox", func(ctx context.Context) error { return ignore(c.TerminateSandbox(ctx, "web")) }},
		{"SleepSandbox", func(ctx context.Context) error { return ignore(c.SleepSandbox(ctx, "web")) }},
		{"WakeSandbox", func(ctx context.Context) error { return ignore(c.WakeSandbox(ctx, "web")) }},
		{"Network", func(ctx context.Context) error { return ignore(c.Network(ctx, "web")) }},
		{"Exec", func(ctx context.Context) error {
			return ignore(c.Exec(ctx, "web", api.CreateCommandRequest{Command: "true"}))
		}},
		{"GetCommand", func(ctx context.Context) error { return ignore(c.GetCommand(ctx, "web", "cmd_1")) }},
		{"ListCommands", func(ctx context.Context) error { return ignore(c.ListCommands(ctx, "web", 0, "")) }},
		{"CommandOutput", func(ctx context.Context) error {
			return c.Output(ctx, "web", "cmd_1", 0, false, func(api.OutputRecord) error { return nil })
		}},
		{"Stdin", func(ctx context.Context) error { return c.Stdin(ctx, "web", "cmd_1", strings.NewReader("x"), true) }},
		{"Signal", func(ctx context.Context) error { return c.Signal(ctx, "web", "cmd_1", "TERM") }},
		{"ListFiles", func(ctx context.Context) error { return ignore(c.ListFiles(ctx, "web", "/w", 0, 0, "")) }},
		{"StatFile", func(ctx context.Context) error { return ignore(c.StatFile(ctx, "web", "/w/a")) }},
		{"ReadFile", func(ctx context.Context) error { return ignore(c.ReadFile(ctx, "web", "/w/a")) }},
		{"WriteFile", func(ctx context.Context) error {
			return ignore(c.WriteFile(ctx, "web", "/w/a", strings.NewReader("x")))
		}},
		{"EditFile", func(ctx context.Context) error {
			return ignore(c.EditFile(ctx, "web", "/w/a", []api.FileEdit{{Old: "a", New: "b"}}))
		}},
		{"Mkdir", func(ctx context.Context) error { return ignore(c.Mkdir(ctx, "web", "/w/d")) }},
		{"MoveFile", func(ctx context.Context) error { return ignore(c.MoveFile(ctx, "web", "/w/a", "/w/b")) }},
		{"RemoveFile", func(ctx context.Context) error { return c.RemoveFile(ctx, "web", "/w/a") }},
		{"ReadArchive", func(ctx context.Context) error { return ignore(c.ReadArchive(ctx, "web", "/w")) }},
		{"WriteArchive", func(ctx context.Context) error {
			return ignore(c.WriteArchive(ctx, "web", "/w", strings.NewReader("")))
		}},
		{"ListEvents", func(ctx context.Context) error { return ignore(c.Events(ctx, cove.EventQuery{})) }},
		{"ImportImage", func(ctx context.Context) error {
			return ignore(c.ImportImage(ctx, "tools", nil, strings.NewReader("not a tar")))
		}},
		{"ListImages", func(ctx context.Context) error { return ignore(c.Images(ctx)) }},
		{"GetImage", func(ctx context.Context) error { return ignore(c.GetImage(ctx, "tools")) }},
		{"UpdateImage", func(ctx context.Context) error {
			return ignore(c.UpdateImage(ctx, "tools", api.ImageSettings{Examples: []string{"ls"}}))
		}},
		{"DeleteImage", func(ctx context.Context) error { return c.DeleteImage(ctx, "tools") }},
		{"ListTemplates", func(ctx context.Context) error { return ignore(c.Templates(ctx)) }},
		{"CreatePreview", func(ctx context.Context) error {
			return ignore(c.CreatePreview(ctx, "web", api.CreatePreviewRequest{Port: 8000}))
		}},
		{"ListPreviews", func(ctx context.Context) error { return ignore(c.Previews(ctx, "web")) }},
		{"DeletePreview", func(ctx context.Context) error { return c.DeletePreview(ctx, "web", "prv_1") }},
	}
	for _, tt := range tests {
		t.Run(tt.method, func(t *testing.T) {
			// The fake's defaults mostly answer not_found; the team is the point.
			err := tt.call(t.Context())
			if code := api.ErrorCode(err); err != nil && code != api.CodeNotFound {
				t.Fatalf("call failed: %v", err)
			}
			got := last(t, s.fake, tt.method)
			if got.TeamID != teamB {
				t.Errorf("%s got team %q; want %q", tt.method, got.TeamID, teamB)
			}
			if strings.Contains(tt.method, "File") || strings.Contains(tt.method, "Archive") || tt.method == "Mkdir" {
				want := files.Target{TeamID: teamB, Ref: "web", Wake: true}
				if got.Target != want {
					t.Errorf("%s got target %+v; want %+v", tt.method, got.Target, want)
				}
			}
		})
	}
	for _, c := range s.fake.Calls() {
		if c.TeamID != teamB {
			t.Errorf("call %+v does not name team B", c)
		}
	}
}

// TestErrorStatus checks the one error → status table against API.md.
func TestErrorStatus(t *testing.T) {
	tests := []struct {
		code   api.Code
		status int
	}{
		{api.CodeInvalidArgument, 400},
		{api.CodeUnauthenticated, 401},
		{api.CodePermissionDenied, 403},
		{api.CodeNotFound, 404},
		{api.CodeConflict, 409},
		{api.CodePreconditionFailed, 412},
		{api.CodePayloadTooLarge, 413},
		{api.CodeUnprocessable, 422},
		{api.CodeResourceExhausted, 429},
		{api.CodeInternal, 500},
		{api.CodeUnavailable, 503},
		{api.CodeInsufficientStorage, 507},
		{api.CodeBudgetExceeded, 402},
	}
	for _, tt := range tests {
		t.Run(string(tt.code), func(t *testing.T) {
			s := newTestServer(t)
			s.fake.GetSandboxFn = func(context.Context, string, string) (api.Sandbox, error) {
				// Wrapped, as the control plane may: the code still counts.
				return api.Sandbox{}, fmt.Errorf("get sandbox: %w", &api.Error{
					Code: tt.code, Message: "what went wrong", Details: map[string]any{"ref": "web"},
				})
			}
			resp, body := s.do(t, http.MethodGet, "/v1/sandboxes/web", nil, nil)
			e := wantError(t, resp, body, tt.status, tt.code)
			if e.Message != "what went wrong" || e.Details["ref"] != "web" {
				t.Errorf("error is %+v; want the message and details the control plane gave", e)
			}
			_, err := s.client.GetSandbox(t.Context(), "web")
			wantCode(t, err, tt.code)
			if msg := api.ErrorMessage(err); msg != "what went wrong" {
				t.Errorf("SDK error message is %q", msg)
			}
		})
	}
}

func TestUncodedErrorIsInternal(t *testing.T) {
	const secret = "secret host path /var/lib/x"
	s := newTestServer(t)
	s.fake.GetSandboxFn = func(context.Context, string, string) (api.Sandbox, error) {
		return api.Sandbox{}, fmt.Errorf("open rootfs: %w", errors.New(secret))
	}
	resp, body := s.do(t, http.MethodGet, "/v1/sandboxes/web", nil, nil)
	e := wantError(t, resp, body, http.StatusInternalServerError, api.CodeInternal)
	if e.Message != "internal error" {
		t.Errorf("message is %q; want \"internal error\"", e.Message)
	}
	for _, leak := range []string{"secret", "/var/lib/x", "rootfs"} {
		if bytes.Contains(body, []byte(leak)) {
			t.Errorf("answer %s shows %q", body, leak)
		}
	}
	_, err := s.client.GetSandbox(t.Context(), "web")
	wantCode(t, err, api.CodeInternal)
	if !strings.Contains(s.logs.String(), "/var/lib/x") {
		t.Errorf("the log does not hold the detail of the error:\n%s", s.logs.String())
	}
}

func TestListSandboxes(t *testing.T) {
	page := api.List[api.Sandbox]{Items: []api.Sandbox{{ID: "sbx_3"}, {ID: "sbx_4"}}, NextCursor: "sbx_4"}
	want := lifecycle.SandboxQuery{
		States: []api.SandboxState{api.StateRunning, api.StateAsleep},
		Labels: map[string]string{"k": "v"},
		Page:   lifecycle.Page{Cursor: "X", Limit: 2},
	}
	s := newTestServer(t)
	var got lifecycle.SandboxQuery
	s.fake.ListSandboxesFn = func(_ context.Context, _ string, q lifecycle.SandboxQuery) (api.List[api.Sandbox], error) {
		got = q
		return page, nil
	}

	t.Run("raw", func(t *testing.T) {
		resp, body := s.do(t, http.MethodGet, "/v1/sandboxes?limit=2&cursor=X&state=running,asleep&label=k=v", nil, nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("answered %d: %s", resp.StatusCode, body)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("query (-want +got):\n%s", diff)
		}
		var l api.List[api.Sandbox]
		if err := json.Unmarshal(body, &l); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(page, l); diff != "" {
			t.Errorf("answer (-want +got):\n%s", diff)
		}
	})
	t.Run("sdk", func(t *testing.T) {
		l, err := s.client.ListSandboxes(t.Context(), cove.SandboxQuery{
			States: want.States, Labels: want.Labels, Limit: 2, Cursor: "X",
		})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("query (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff(page, l); diff != "" {
			t.Errorf("answer (-want +got):\n%s", diff)
		}
	})
	t.Run("limit 1000", func(t *testing.T) {
		if _, err := s.client.ListSandboxes(t.Context(), cove.SandboxQuery{Limit: 1000}); err != nil {
			t.Fatal(err)
		}
		if got.Limit != 1000 {
			t.Errorf("limit reached as %d", got.Limit)
		}
	})
	t.Run("label without value", func(t *testing.T) {
		n := s.fake.Count("ListSandboxes")
		resp, body := s.do(t, http.MethodGet, "/v1/sandboxes?label=k", nil, nil)
		wantError(t, resp, body, http.StatusBadRequest, api.CodeInvalidArgument)
		if s.fake.Count("ListSandboxes") != n {
			t.Error("a bad filter reached the control plane")
		}
	})
}

func TestListBadLimit(t *testing.T) {
	paths := []string{
		"/v1/sandboxes?",
		"/v1/sandboxes/web/commands?",
		"/v1/events?",
		"/v1/events/stream?",
		"/v1/sandboxes/web/files?path=/w&",
	}
	for _, path := range paths {
		for _, limit := range []string{"0", "1001", "abc", "-1", "2.5"} {
			t.Run(path+"limit="+limit, func(t *testing.T) {
				s := newTestServer(t)
				resp, body := s.do(t, http.MethodGet, path+"limit="+limit, nil, nil)
				wantError(t, resp, body, http.StatusBadRequest, api.CodeInvalidArgument)
				wantNoCalls(t, s.fake)
			})
		}
	}
}

func TestListCommands(t *testing.T) {
	page := api.List[api.Command]{Items: []api.Command{{ID: "cmd_2", SandboxID: "sbx_1"}}, NextCursor: "cmd_2"}
	s := newTestServer(t)
	var gotRef string
	var got lifecycle.CommandQuery
	s.fake.ListCommandsFn = func(_ context.Context, _, ref string, q lifecycle.CommandQuery) (api.List[api.Command], error) {
		gotRef, got = ref, q
		return page, nil
	}
	resp, body := s.do(t, http.MethodGet, "/v1/sandboxes/web/commands?limit=5&cursor=cmd_1&state=running,exited", nil, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("answered %d: %s", resp.StatusCode, body)
	}
	want := lifecycle.CommandQuery{States: []api.CommandState{api.CommandRunning, api.CommandExited}, Page: lifecycle.Page{Cursor: "cmd_1", Limit: 5}}
	if diff := cmp.Diff(want, got); diff != "" || gotRef != "web" {
		t.Errorf("ref %q, query (-want +got):\n%s", gotRef, diff)
	}

	l, err := s.client.ListCommands(t.Context(), "web", 7, "cmd_9")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(lifecycle.CommandQuery{Page: lifecycle.Page{Cursor: "cmd_9", Limit: 7}}, got); diff != "" {
		t.Errorf("query (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(page, l); diff != "" {
		t.Errorf("answer (-want +got):\n%s", diff)
	}
}

func TestListEvents(t *testing.T) {
	tests := []struct {
		name, query string
		want        lifecycle.EventQuery
	}{
		{"filters", "?sandbox=web&type=a,b&type=c&limit=3",
			lifecycle.EventQuery{Sandbox: "web", Types: []string{"a", "b", "c"}, Page: lifecycle.Page{Limit: 3}}},
		{"cursor", "?cursor=evt_1", lifecycle.EventQuery{Page: lifecycle.Page{Cursor: "evt_1"}}},
		{"after wins over cursor", "?cursor=evt_1&after=evt_9", lifecycle.EventQuery{Page: lifecycle.Page{Cursor: "evt_9"}}},
	}
	page := api.List[api.Event]{Items: []api.Event{{ID: "evt_2", Type: "sandbox.running", SandboxID: "sbx_1"}}, NextCursor: "evt_2"}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newTestServer(t)
			var got lifecycle.EventQuery
			s.fake.ListEventsFn = func(_ context.Context, _ string, q lifecycle.EventQuery) (api.List[api.Event], error) {
				got = q
				return page, nil
			}
			resp, body := s.do(t, http.MethodGet, "/v1/events"+tt.query, nil, nil)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("answered %d: %s", resp.StatusCode, body)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("query (-want +got):\n%s", diff)
			}
			var l api.List[api.Event]
			if err := json.Unmarshal(body, &l); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(page, l); diff != "" {
				t.Errorf("answer (-want +got):\n%s", diff)
			}
		})
	}
	t.Run("sdk", func(t *testing.T) {
		s := newTestServer(t)
		var got lifecycle.EventQuery
		s.fake.ListEventsFn = func(_ context.Context, _ string, q lifecycle.EventQuery) (api.List[api.Event], error) {
			got = q
			return page, nil
		}
		l, err := s.client.Events(t.Context(), cove.EventQuery{Sandbox: "web", Types: []string{"a", "b"}, After: "evt_1", Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		want := lifecycle.EventQuery{Sandbox: "web", Types: []string{"a", "b"}, Page: lifecycle.Page{Cursor: "evt_1", Limit: 10}}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("query (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff(page, l); diff != "" {
			t.Errorf("answer (-want +got):\n%s", diff)
		}
	})
}

// TestEventStream follows the stream from a cursor: the cursor is checked
// first, then pages come after it.
func TestEventStream(t *testing.T) {
	s := newTestServer(t)
	log := []api.Event{{ID: "evt_1", Type: "a"}, {ID: "evt_2", Type: "b"}, {ID: "evt_3", Type: "c"}}
	var mu sync.Mutex
	var queries []lifecycle.EventQuery
	s.fake.ListEventsFn = func(_ context.Context, _ string, q lifecycle.EventQuery) (api.List[api.Event], error) {
		mu.Lock()
		queries = append(queries, q)
		mu.Unlock()
		out := api.List[api.Event]{Items: []api.Event{}}
		for i, e := range log {
			if e.ID > q.Cursor && len(out.Items) < q.Limit {
				out.Items = append(out.Items, log[i])
			}
		}
		return out, nil
	}
	stop := errors.New("seen enough")
	var got []string
	err := s.client.FollowEvents(t.Context(), cove.EventQuery{After: "evt_1", Types: []string{"b", "c"}}, func(e api.Event) error {
		got = append(got, e.ID)
		if e.ID == "evt_3" {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) {
		t.Fatalf("FollowEvents: %v", err)
	}
	if diff := cmp.Diff([]string{"evt_2", "evt_3"}, got); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	mu.Lock()
	defer mu.Unlock()
	wantFirst := []lifecycle.EventQuery{
		{Types: []string{"b", "c"}, Page: lifecycle.Page{Cursor: "evt_1", Limit: 1}},   // the check
		{Types: []string{"b", "c"}, Page: lifecycle.Page{Cursor: "evt_1", Limit: 500}}, // the first page
	}
	if len(queries) < 2 {
		t.Fatalf("queries: %+v", queries)
	}
	if diff := cmp.Diff(wantFirst, queries[:2]); diff != "" {
		t.Errorf("queries (-want +got):\n%s", diff)
	}
}

func TestEventStreamBadSandbox(t *testing.T) {
	s := newTestServer(t)
	s.fake.ListEventsFn = func(_ context.Context, _ string, q lifecycle.EventQuery) (api.List[api.Event], error) {
		return api.List[api.Event]{}, notFound("sandbox", q.Sandbox)
	}
	err := s.client.FollowEvents(t.Context(), cove.EventQuery{Sandbox: "nope"}, func(api.Event) error { return nil })
	wantCode(t, err, api.CodeNotFound)
}

func TestSandboxes(t *testing.T) {
	sb := api.Sandbox{ID: "sbx_1", Name: "web", TeamID: teamA, State: api.StateRunning, Labels: map[string]string{"k": "v"}}
	t.Run("create", func(t *testing.T) {
		s := newTestServer(t)
		req := api.CreateSandboxRequest{
			Name: "fix-issue-42", Template: "managed",
			Resources:    &api.ResourcesRequest{CPUs: ptr(1.5), MemoryMiB: ptr[int64](1024)},
			Env:          map[string]string{"FOO": "bar"},
			Secrets:      map[string]api.SecretRef{"GITHUB_TOKEN": {Secret: "github-token"}},
			Workdir:      "/workspace",
			Network:      &api.NetworkPolicy{Allow: []string{"api.github.com"}},
			Source:       &api.Source{Type: "git", URL: "https://example.com/r.git", Ref: "main"},
			Setup:        &api.Setup{Command: "make", TimeoutS: 900},
			IdleTimeoutS: ptr[int64](900), OnIdle: "sleep", MaxLifetimeS: ptr[int64](86400),
			SpendLimitUSD: ptr(5.0), Labels: map[string]string{"ticket": "42"},
		}
		var got api.CreateSandboxRequest
		s.fake.CreateSandboxFn = func(_ context.Context, _ string, r api.CreateSandboxRequest) (api.Sandbox, error) {
			got = r
			return sb, nil
		}
		out, err := s.client.CreateSandbox(t.Context(), req, false)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(req, got); diff != "" {
			t.Errorf("request (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff(sb, out); diff != "" {
			t.Errorf("answer (-want +got):\n%s", diff)
		}
		if n := s.fake.Count("WaitSandbox"); n != 0 {
			t.Errorf("create without wait waited %d times", n)
		}
	})
	t.Run("create and wait", func(t *testing.T) {
		s := newTestServer(t)
		var gotRef string
		var gotWant api.SandboxState
		s.fake.WaitSandboxFn = func(_ context.Context, _, ref string, want api.SandboxState, _ time.Duration) (api.Sandbox, error) {
			gotRef, gotWant = ref, want
			return sb, nil
		}
		out, err := s.client.CreateSandbox(t.Context(), api.CreateSandboxRequest{Name: "web"}, true)
		if err != nil {
			t.Fatal(err)
		}
		if gotRef != "sbx_1" || gotWant != api.StateRunning || out.State != api.StateRunning {
			t.Errorf("waited on %q for %q and got %+v; want sbx_1 running", gotRef, gotWant, out)
		}
	})
	t.Run("create from the warm pool and wait", func(t *testing.T) {
		// A create that answers the sandbox running (taken from the warm
		// pool) is not waited on, nor read again.
		s := newTestServer(t)
		s.fake.CreateSandboxFn = func(context.Context, string, api.CreateSandboxRequest) (api.Sandbox, error) {
			return sb, nil
		}
		out, err := s.client.CreateSandbox(t.Context(), api.CreateSandboxRequest{Name: "web"}, true)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(sb, out); diff != "" {
			t.Errorf("answer (-want +got):\n%s", diff)
		}
		if n := s.fake.Count("WaitSandbox") + s.fake.Count("GetSandbox"); n != 0 {
			t.Errorf("a create answered running was waited on or read %d times", n)
		}
	})
	t.Run("get", func(t *testing.T) {
		s := newTestServer(t)
		var gotRef string
		s.fake.GetSandboxFn = func(_ context.Context, _, ref string) (api.Sandbox, error) {
			gotRef = ref
			return sb, nil
		}
		out, err := s.client.GetSandbox(t.Context(), "web")
		if err != nil {
			t.Fatal(err)
		}
		if gotRef != "web" || !cmp.Equal(sb, out) {
			t.Errorf("ref %q answered %+v", gotRef, out)
		}
	})
	t.Run("wait", func(t *testing.T) {
		s := newTestServer(t)
		var gotRef string
		var gotWant api.SandboxState
		var gotTimeout time.Duration
		s.fake.WaitSandboxFn = func(_ context.Context, _, ref string, want api.SandboxState, timeout time.Duration) (api.Sandbox, error) {
			gotRef, gotWant, gotTimeout = ref, want, timeout
			return sb, nil
		}
		if _, err := s.client.WaitSandbox(t.Context(), "web", api.StateAsleep, 30*time.Second); err != nil {
			t.Fatal(err)
		}
		if gotRef != "web" || gotWant != api.StateAsleep || gotTimeout != 30*time.Second {
			t.Errorf("waited on %q for %q for %v; want web, asleep, 30s", gotRef, gotWant, gotTimeout)
		}
		if n := s.fake.Count("GetSandbox"); n != 0 {
			t.Errorf("a wait also got the sandbox %d times", n)
		}
		for _, q := range []string{"wait=bogus", "wait=running&timeout_s=3601", "wait=running&timeout_s=abc"} {
			resp, body := s.do(t, http.MethodGet, "/v1/sandboxes/web?"+q, nil, nil)
			wantError(t, resp, body, http.StatusBadRequest, api.CodeInvalidArgument)
		}
		if n := s.fake.Count("WaitSandbox"); n != 1 {
			t.Errorf("bad waits reached the control plane: %d waits", n)
		}
	})
	actions := []struct {
		name   string
		method string
		call   func(c *cove.Client, ctx context.Context) (api.Sandbox, error)
		set    func(f *fakeControlPlane, fn func(ref string) (api.Sandbox, error))
	}{
		{"delete", "TerminateSandbox",
			func(c *cove.Client, ctx context.Context) (api.Sandbox, error) { return c.TerminateSandbox(ctx, "web") },
			func(f *fakeControlPlane, fn func(string) (api.Sandbox, error)) {
				f.TerminateSandboxFn = func(_ context.Context, _, ref string) (api.Sandbox, error) { return fn(ref) }
			}},
		{"sleep", "SleepSandbox",
			func(c *cove.Client, ctx context.Context) (api.Sandbox, error) { return c.SleepSandbox(ctx, "web") },
			func(f *fakeControlPlane, fn func(string) (api.Sandbox, error)) {
				f.SleepSandboxFn = func(_ context.Context, _, ref, _ string) (api.Sandbox, error) { return fn(ref) }
			}},
		{"wake", "WakeSandbox",
			func(c *cove.Client, ctx context.Context) (api.Sandbox, error) { return c.WakeSandbox(ctx, "web") },
			func(f *fakeControlPlane, fn func(string) (api.Sandbox, error)) {
				f.WakeSandboxFn = func(_ context.Context, _, ref string) (api.Sandbox, error) { return fn(ref) }
			}},
	}
	for _, tt := range actions {
		t.Run(tt.name, func(t *testing.T) {
			s := newTestServer(t)
			var gotRef string
			tt.set(s.fake, func(ref string) (api.Sandbox, error) {
				gotRef = ref
				return sb, nil
			})
			out, err := tt.call(s.client, t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if gotRef != "web" || !cmp.Equal(sb, out) {
				t.Errorf("ref %q answered %+v", gotRef, out)
			}
		})
	}
	t.Run("patch", func(t *testing.T) {
		s := newTestServer(t)
		req := api.UpdateSandboxRequest{
			IdleTimeoutS: ptr[int64](60), OnIdle: ptr("terminate"), MaxLifetimeS: ptr[int64](3600),
			SpendLimitUSD: ptr(2.5), Network: &api.NetworkPolicy{Allow: []string{"example.com:443"}},
			Labels: map[string]string{"k": "w"},
		}
		var gotRef string
		var got api.UpdateSandboxRequest
		s.fake.UpdateSandboxFn = func(_ context.Context, _, ref string, r api.UpdateSandboxRequest) (api.Sandbox, error) {
			gotRef, got = ref, r
			return sb, nil
		}
		out, err := s.client.UpdateSandbox(t.Context(), "web", req)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(req, got); diff != "" || gotRef != "web" {
			t.Errorf("ref %q, request (-want +got):\n%s", gotRef, diff)
		}
		if !cmp.Equal(sb, out) {
			t.Errorf("answered %+v", out)
		}
	})
}

// TestSandboxStatuses checks the statuses and headers API.md names.
func TestSandboxStatuses(t *testing.T) {
	s := newTestServer(t)
	sb := api.Sandbox{ID: "sbx_1", State: api.StateRunning}
	ok := func(context.Context, string, string) (api.Sandbox, error) { return sb, nil }
	s.fake.GetSandboxFn, s.fake.TerminateSandboxFn, s.fake.WakeSandboxFn = ok, ok, ok
	s.fake.SleepSandboxFn = func(context.Context, string, string, string) (api.Sandbox, error) { return sb, nil }
	s.fake.UpdateSandboxFn = func(context.Context, string, string, api.UpdateSandboxRequest) (api.Sandbox, error) { return sb, nil }
	tests := []struct {
		method, path, body string
		status             int
		location           string
	}{
		{http.MethodPost, "/v1/sandboxes", `{"name":"web"}`, http.StatusCreated, "/v1/sandboxes/sbx_1"},
		{http.MethodPost, "/v1/sandboxes", ``, http.StatusCreated, "/v1/sandboxes/sbx_1"},
		{http.MethodGet, "/v1/sandboxes/web", ``, http.StatusOK, ""},
		{http.MethodPatch, "/v1/sandboxes/web", `{"labels":{"a":"b"}}`, http.StatusOK, ""},
		{http.MethodDelete, "/v1/sandboxes/web", ``, http.StatusAccepted, ""},
		{http.MethodPost, "/v1/sandboxes/web/sleep", ``, http.StatusAccepted, ""},
		{http.MethodPost, "/v1/sandboxes/web/wake", ``, http.StatusAccepted, ""},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			resp, body := s.do(t, tt.method, tt.path, nil, strings.NewReader(tt.body))
			if resp.StatusCode != tt.status {
				t.Fatalf("answered %d; want %d (%s)", resp.StatusCode, tt.status, body)
			}
			if got := resp.Header.Get("Location"); got != tt.location {
				t.Errorf("Location is %q; want %q", got, tt.location)
			}
			var out api.Sandbox
			if err := json.Unmarshal(body, &out); err != nil || out.ID != "sbx_1" {
				t.Errorf("body %s is not the sandbox (%v)", body, err)
			}
		})
	}
}

func TestExec(t *testing.T) {
	cmd := api.Command{ID: "cmd_1", SandboxID: "sbx_1", Command: "echo hi", State: api.CommandRunning}
	req := api.CreateCommandRequest{
		Command: "echo hi", Cwd: "/w", Env: map[string]string{"A": "1"}, Secrets: map[string]string{"T": "tok"},
		TimeoutS: ptr[int64](60), Stdin: true, NoOutputAlertS: ptr[int64](5), User: "root", PTY: &api.PTY{Cols: 80, Rows: 24},
	}
	newExec := func(t *testing.T) (*testServer, *string, *api.CreateCommandRequest) {
		s := newTestServer(t)
		var gotRef string
		var got api.CreateCommandRequest
		s.fake.ExecFn = func(_ context.Context, _, ref string, _ bool, r api.CreateCommandRequest) (api.Command, error) {
			gotRef, got = ref, r
			return cmd, nil
		}
		return s, &gotRef, &got
	}
	t.Run("no wait", func(t *testing.T) {
		s, gotRef, got := newExec(t)
		out, err := s.client.Exec(t.Context(), "web", req)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(req, *got); diff != "" || *gotRef != "web" {
			t.Errorf("ref %q, request (-want +got):\n%s", *gotRef, diff)
		}
		if !cmp.Equal(cmd, out) {
			t.Errorf("answered %+v", out)
		}
		resp, body := s.do(t, http.MethodPost, "/v1/sandboxes/web/commands", nil, strings.NewReader(`{"argv":["true"]}`))
		if resp.StatusCode != http.StatusCreated || resp.Header.Get("Location") != "/v1/sandboxes/sbx_1/commands/cmd_1" {
			t.Errorf("answered %d with Location %q: %s", resp.StatusCode, resp.Header.Get("Location"), body)
		}
		if s.fake.Count("WaitCommand") != 0 {
			t.Error("a command without wait was waited on")
		}
	})
	t.Run("wait", func(t *testing.T) {
		s, _, _ := newExec(t)
		res := api.CommandResult{Command: cmd, Stdout: "hi\n", Stderr: "warn\n", Truncated: true}
		res.Command.State, res.Command.ExitCode = api.CommandExited, ptr(0)
		var gotSandbox, gotID string
		s.fake.WaitCommandFn = func(_ context.Context, _, ref, id string) (api.CommandResult, error) {
			gotSandbox, gotID = ref, id
			return res, nil
		}
		out, err := s.client.ExecWait(t.Context(), "web", req)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(res, out); diff != "" {
			t.Errorf("answer (-want +got):\n%s", diff)
		}
		if gotSandbox != "sbx_1" || gotID != "cmd_1" {
			t.Errorf("waited on %s/%s; want sbx_1/cmd_1", gotSandbox, gotID)
		}
	})
	t.Run("bad wait", func(t *testing.T) {
		s, _, _ := newExec(t)
		resp, body := s.do(t, http.MethodPost, "/v1/sandboxes/web/commands?wait=maybe", nil, strings.NewReader(`{"command":"true"}`))
		wantError(t, resp, body, http.StatusBadRequest, api.CodeInvalidArgument)
		wantNoCalls(t, s.fake)
	})
}

// TestExecWake checks a command wakes its sandbox by default and that
// ?wake=false (the Go SDK's ExecNoWake) reaches the control plane, with
// and without wait; a wake that is not a boolean is refused first.
func TestExecWake(t *testing.T) {
	calls := map[string]func(c *cove.Client, ctx context.Context, opts ...cove.ExecOption) error{
		"Exec": func(c *cove.Client, ctx context.Context, o ...cove.ExecOption) error {
			_, err := c.Exec(ctx, "web", api.CreateCommandRequest{Command: "true"}, o...)
			return err
		},
		"ExecWait": func(c *cove.Client, ctx context.Context, o ...cove.ExecOption) error {
			_, err := c.ExecWait(ctx, "web", api.CreateCommandRequest{Command: "true"}, o...)
			return err
		},
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			for _, wake := range []bool{true, false} {
				s := newTestServer(t)
				var got *bool
				s.fake.ExecFn = func(_ context.Context, _, _ string, w bool, _ api.CreateCommandRequest) (api.Command, error) {
					got = &w
					return api.Command{}, api.Errorf(api.CodeConflict, "sandbox sbx_1 is asleep and wake=false was given")
				}
				var opts []cove.ExecOption
				if !wake {
					opts = append(opts, cove.ExecNoWake())
				}
				wantCode(t, call(s.client, t.Context(), opts...), api.CodeConflict)
				if got == nil {
					t.Errorf("the command did not reach the control plane")
				} else if *got != wake {
					t.Errorf("wake reached the control plane as %v; want %v", *got, wake)
				}
			}
		})
	}
	t.Run("bad wake", func(t *testing.T) {
		s := newTestServer(t)
		resp, body := s.do(t, http.MethodPost, "/v1/sandboxes/web/commands?wake=maybe", nil, strings.NewReader(`{"command":"true"}`))
		wantError(t, resp, body, http.StatusBadRequest, api.CodeInvalidArgument)
		wantNoCalls(t, s.fake)
	})
}

func TestCommandStdinAndSignal(t *testing.T) {
	s := newTestServer(t)
	var gotIn string
	var gotEOF bool
	s.fake.StdinFn = func(_ context.Context, _, ref, id string, r io.Reader, eof bool) error {
		b, err := io.ReadAll(r)
		gotIn, gotEOF = ref+"/"+id+":"+string(b), eof
		return err
	}
	var gotSig string
	s.fake.SignalFn = func(_ context.Context, _, ref, id, sig string) error {
		gotSig = ref + "/" + id + ":" + sig
		return nil
	}
	if err := s.client.Stdin(t.Context(), "web", "cmd_1", strings.NewReader("input"), true); err != nil {
		t.Fatal(err)
	}
	if gotIn != "web/cmd_1:input" || !gotEOF {
		t.Errorf("stdin got %q eof=%v", gotIn, gotEOF)
	}
	if err := s.client.Signal(t.Context(), "web", "cmd_1", "TERM"); err != nil {
		t.Fatal(err)
	}
	if gotSig != "web/cmd_1:TERM" {
		t.Errorf("signal got %q", gotSig)
	}
}

// serveOutput makes the fake answer every command with out.
func serveOutput(s *testServer, out *memOutput) {
	s.fake.CommandOutputFn = func(_ context.Context, _, ref, id string) (api.Command, node.Output, error) {
		return api.Command{ID: id, SandboxID: "sbx_1"}, out, nil
	}
}

func TestCommandOutput(t *testing.T) {
	ended := func() *memOutput {
		return newOutput().add("stdout", "hello ").add("stderr", "oops\n").truncate().
			end(node.Exit{ExitCode: 137, Signal: "KILL", TimedOut: true})
	}
	chunk1 := api.OutputRecord{Seq: 1, Stream: "stdout", Data: []byte("hello ")}
	chunk2 := api.OutputRecord{Seq: 2, Stream: "stderr", Data: []byte("oops\n")}
	marker := api.OutputRecord{Seq: 3, Type: "truncated"}
	exit := api.OutputRecord{Seq: 4, Type: "exit", ExitCode: ptr(137), Signal: "KILL", TimedOut: true}
	tests := []struct {
		name   string
		out    *memOutput
		after  int64
		follow bool
		want   []api.OutputRecord
	}{
		{"all", ended(), 0, false, []api.OutputRecord{chunk1, chunk2, marker, exit}},
		{"all, follow", ended(), 0, true, []api.OutputRecord{chunk1, chunk2, marker, exit}},
		{"after a chunk", ended(), 2, false, []api.OutputRecord{marker, exit}},
		{"after the last chunk", ended(), 3, false, []api.OutputRecord{exit}},
		{"running, no follow", newOutput().add("stdout", "hello ").add("stderr", "oops\n"), 0, false,
			[]api.OutputRecord{chunk1, chunk2}},
		{"exit without output", newOutput().end(node.Exit{ExitCode: 1}), 0, false,
			[]api.OutputRecord{{Seq: 1, Type: "exit", ExitCode: ptr(1)}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newTestServer(t)
			serveOutput(s, tt.out)
			var got []api.OutputRecord
			err := s.client.Output(t.Context(), "web", "cmd_1", tt.after, tt.follow, func(r api.OutputRecord) error {
				got = append(got, r)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("records (-want +got):\n%s", diff)
			}
		})
	}
	t.Run("after the exit", func(t *testing.T) {
		// The stream of an ended command still ends with its exit (the
		// client learns how it ended), numbered past what it saw.
		s := newTestServer(t)
		serveOutput(s, ended())
		var got []api.OutputRecord
		err := s.client.Output(t.Context(), "web", "cmd_1", 4, true, func(r api.OutputRecord) error {
			got = append(got, r)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || got[0].Type != "exit" || got[0].Seq <= 4 || got[0].ExitCode == nil || *got[0].ExitCode != 137 {
			t.Errorf("records %+v; want the exit alone, after seq 4", got)
		}
	})
	t.Run("content type", func(t *testing.T) {
		s := newTestServer(t)
		serveOutput(s, ended())
		resp, body := s.do(t, http.MethodGet, "/v1/sandboxes/web/commands/cmd_1/output", nil, nil)
		if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || ct != "application/x-ndjson" {
			t.Errorf("answered %d %q", resp.StatusCode, ct)
		}
		if n := bytes.Count(body, []byte("\n")); n != 4 {
			t.Errorf("%d lines; want 4:\n%s", n, body)
		}
	})
	t.Run("bad after", func(t *testing.T) {
		s := newTestServer(t)
		resp, body := s.do(t, http.MethodGet, "/v1/sandboxes/web/commands/cmd_1/output?after=-1", nil, nil)
		wantError(t, resp, body, http.StatusBadRequest, api.CodeInvalidArgument)
		wantNoCalls(t, s.fake)
	})
}

// TestCommandOutputFollow follows a running command: output recorded while
// the client reads reaches it, and the stream ends with the exit.
func TestCommandOutputFollow(t *testing.T) {
	s := newTestServer(t)
	out := newOutput().add("stdout", "first")
	serveOutput(s, out)
	var got []api.OutputRecord
	err := s.client.Output(t.Context(), "web", "cmd_1", 0, true, func(r api.OutputRecord) error {
		got = append(got, r)
		if r.Seq == 1 {
			out.add("stderr", "more").end(node.Exit{ExitCode: 0})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []api.OutputRecord{
		{Seq: 1, Stream: "stdout", Data: []byte("first")},
		{Seq: 2, Stream: "stderr", Data: []byte("more")},
		{Seq: 3, Type: "exit", ExitCode: ptr(0)},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("records (-want +got):\n%s", diff)
	}
}

func TestCommandStream(t *testing.T) {
	s := newTestServer(t)
	serveOutput(s, newOutput().add("stdout", "hello ").add("stderr", "oops\n").add("stdout", "world").end(node.Exit{}))
	tests := []struct {
		name, stream, rng string
		status            int
		body, contentRng  string
	}{
		{"stdout", "stdout", "", http.StatusOK, "hello world", ""},
		{"stderr", "stderr", "", http.StatusOK, "oops\n", ""},
		{"stdout range", "stdout", "bytes=6-10", http.StatusPartialContent, "world", "bytes 6-10/11"},
		{"stdout suffix", "stdout", "bytes=-5", http.StatusPartialContent, "world", "bytes 6-10/11"},
		{"unsatisfiable", "stdout", "bytes=20-", http.StatusRequestedRangeNotSatisfiable, "", "bytes */11"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := s.do(t, http.MethodGet, "/v1/sandboxes/web/commands/cmd_1/"+tt.stream, map[string]string{"Range": tt.rng}, nil)
			if resp.StatusCode != tt.status {
				t.Fatalf("answered %d; want %d (%s)", resp.StatusCode, tt.status, body)
			}
			if tt.status != http.StatusRequestedRangeNotSatisfiable && string(body) != tt.body {
				t.Errorf("body is %q; want %q", body, tt.body)
			}
			if got := resp.Header.Get("Content-Range"); got != tt.contentRng {
				t.Errorf("Content-Range is %q; want %q", got, tt.contentRng)
			}
		})
	}
}

// closeTracker is a file body that tells whether it was closed.
type closeTracker struct {
	io.Reader
	closed atomic.Bool
}

func (c *closeTracker) Close() error {
	c.closed.Store(true)
	return nil
}

func digestOf(s string) string {
	sum := sha256.Sum256([]byte(s))
	return api.FormatReprDigest(sum[:])
}

func TestReadFile(t *testing.T) {
	const data = "hello world"
	t.Run("headers and conditions", func(t *testing.T) {
		s := newTestServer(t)
		var got node.ReadSpec
		var gotTarget files.Target
		body := &closeTracker{Reader: strings.NewReader("hello")}
		s.fake.ReadFileFn = func(_ context.Context, tg files.Target, spec node.ReadSpec) (*node.Content, error) {
			got, gotTarget = spec, tg
			return &node.Content{
				Status: http.StatusPartialContent, ContentLength: 5, ContentRange: "bytes 0-4/11",
				ContentType: "text/plain; charset=utf-8", ETag: `"v1"`, ReprDigest: digestOf(data),
				LastModified: "Mon, 02 Jan 2006 15:04:05 GMT", Body: body,
			}, nil
		}
		resp, b := s.do(t, http.MethodGet, "/v1/sandboxes/web/files/content?path=/w/a.txt", map[string]string{
			"Range": "bytes=0-4", "If-Range": `"v1"`, "If-None-Match": `"v0"`, "If-Match": `"v1"`,
			"If-Modified-Since": "Sun, 01 Jan 2006 00:00:00 GMT", "If-Unmodified-Since": "Tue, 03 Jan 2006 00:00:00 GMT",
		}, nil)
		want := node.ReadSpec{
			Path: "/w/a.txt", Range: "bytes=0-4", IfRange: `"v1"`, IfMatch: []string{`"v1"`}, IfNoneMatch: []string{`"v0"`},
			IfModifiedSince: "Sun, 01 Jan 2006 00:00:00 GMT", IfUnmodifiedSince: "Tue, 03 Jan 2006 00:00:00 GMT",
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("read spec (-want +got):\n%s", diff)
		}
		if want := (files.Target{TeamID: teamA, Ref: "web", Wake: true}); gotTarget != want {
			t.Errorf("target is %+v; want %+v", gotTarget, want)
		}
		if resp.StatusCode != http.StatusPartialContent || string(b) != "hello" {
			t.Fatalf("answered %d %q", resp.StatusCode, b)
		}
		for k, v := range map[string]string{
			"ETag": `"v1"`, "Repr-Digest": digestOf(data), "Content-Length": "5", "Content-Range": "bytes 0-4/11",
			"Content-Type": "text/plain; charset=utf-8", "Last-Modified": "Mon, 02 Jan 2006 15:04:05 GMT",
			"Accept-Ranges": "bytes", "Cache-Control": "no-store",
		} {
			if got := resp.Header.Get(k); got != v {
				t.Errorf("%s is %q; want %q", k, got, v)
			}
		}
		if !body.closed.Load() {
			t.Error("the file's body was not closed")
		}
	})
	t.Run("not modified", func(t *testing.T) {
		s := newTestServer(t)
		body := &closeTracker{Reader: strings.NewReader("")}
		s.fake.ReadFileFn = func(context.Context, files.Target, node.ReadSpec) (*node.Content, error) {
			return &node.Content{Status: http.StatusNotModified, ContentLength: -1, ETag: `"v1"`, Body: body}, nil
		}
		resp, b := s.do(t, http.MethodGet, "/v1/sandboxes/web/files/content?path=/w/a.txt", map[string]string{"If-None-Match": `"v1"`}, nil)
		if resp.StatusCode != http.StatusNotModified || len(b) != 0 || resp.Header.Get("ETag") != `"v1"` {
			t.Errorf("answered %d, ETag %q, body %q", resp.StatusCode, resp.Header.Get("ETag"), b)
		}
		if !body.closed.Load() {
			t.Error("the file's body was not closed")
		}
	})
	t.Run("sdk", func(t *testing.T) {
		s := newTestServer(t)
		var got node.ReadSpec
		s.fake.ReadFileFn = func(_ context.Context, _ files.Target, spec node.ReadSpec) (*node.Content, error) {
			got = spec
			c := &node.Content{Status: http.StatusOK, ContentLength: int64(len(data)), ETag: `"v1"`, ReprDigest: digestOf(data),
				Body: io.NopCloser(strings.NewReader(data))}
			if spec.Range != "" {
				c.Status, c.ContentLength, c.ContentRange = http.StatusPartialContent, 5, "bytes 6-10/11"
				c.Body = io.NopCloser(strings.NewReader("world"))
			}
			return c, nil
		}
		var buf bytes.Buffer
		f, err := s.client.DownloadFile(t.Context(), "web", "/w/a.txt", &buf)
		if err != nil {
			t.Fatal(err)
		}
		if buf.String() != data || f.Version != "v1" || f.Size != int64(len(data)) || f.Partial {
			t.Errorf("downloaded %q as %+v", buf.String(), f)
		}
		buf.Reset()
		f, err = s.client.DownloadFile(t.Context(), "web", "/w/a.txt", &buf, cove.ByteRange(6, 10))
		if err != nil {
			t.Fatal(err)
		}
		if buf.String() != "world" || !f.Partial || got.Range != "bytes=6-10" {
			t.Errorf("downloaded %q as %+v with range %q", buf.String(), f, got.Range)
		}
	})
}

func TestWriteFile(t *testing.T) {
	const data = "new content"
	entry := api.FileEntry{Name: "a.txt", Path: "/w/a.txt", Type: api.FileTypeFile, Size: int64(len(data)), Mode: "0600", Version: "v2"}
	newWrite := func(t *testing.T, created bool) (*testServer, *files.WriteRequest, *string, *string) {
		s := newTestServer(t)
		var got files.WriteRequest
		var gotBody, gotTrailer string
		s.fake.WriteFileFn = func(_ context.Context, _ files.Target, req files.WriteRequest, body io.Reader) (api.FileEntry, bool, error) {
			b, err := io.ReadAll(body)
			if err != nil {
				return api.FileEntry{}, false, err
			}
			if req.Trailer != nil {
				if gotTrailer, err = req.Trailer(); err != nil {
					return api.FileEntry{}, false, err
				}
			}
			got, gotBody = req, string(b)
			return entry, created, nil
		}
		return s, &got, &gotBody, &gotTrailer
	}
	sum := sha256.Sum256([]byte(data))
	hexSum := hex.EncodeToString(sum[:])

	t.Run("sdk with If-Match", func(t *testing.T) {
		s, got, gotBody, gotTrailer := newWrite(t, false)
		out, err := s.client.WriteFile(t.Context(), "web", "/w/a.txt", strings.NewReader(data),
			cove.IfMatch("v1"), cove.WithMode("0600"), cove.AsUser("root"))
		if err != nil {
			t.Fatal(err)
		}
		if got.Trailer == nil {
			t.Error("the request's digest trailer did not reach the control plane")
		}
		got.Trailer = nil
		want := files.WriteRequest{Path: "/w/a.txt", User: "root", Mode: "0600", IfMatch: []string{"v1"}, Size: -1}
		if diff := cmp.Diff(want, *got); diff != "" {
			t.Errorf("request (-want +got):\n%s", diff)
		}
		if *gotBody != data || *gotTrailer != hexSum {
			t.Errorf("body %q with trailer digest %q; want %q with %q", *gotBody, *gotTrailer, data, hexSum)
		}
		if !cmp.Equal(entry, out) {
			t.Errorf("answered %+v", out)
		}
	})
	t.Run("raw If-None-Match and digest", func(t *testing.T) {
		s, got, gotBody, _ := newWrite(t, true)
		resp, b := s.do(t, http.MethodPut, "/v1/sandboxes/web/files/content?path=/w/a.txt", map[string]string{
			"If-None-Match": "*", "Repr-Digest": digestOf(data), "If-Match": `"v1", "v0"`,
		}, strings.NewReader(data))
		if resp.StatusCode != http.StatusCreated || resp.Header.Get("ETag") != `"v2"` {
			t.Fatalf("answered %d with ETag %q: %s", resp.StatusCode, resp.Header.Get("ETag"), b)
		}
		want := files.WriteRequest{Path: "/w/a.txt", IfMatch: []string{"v1", "v0"}, IfNoneMatch: true, SHA256: hexSum, Size: int64(len(data))}
		if diff := cmp.Diff(want, *got); diff != "" {
			t.Errorf("request (-want +got):\n%s", diff)
		}
		if *gotBody != data {
			t.Errorf("body %q", *gotBody)
		}
	})
	for _, tt := range []struct{ name, header, value string }{
		{"If-None-Match not *", "If-None-Match", `"v1"`},
		{"bad Repr-Digest", "Repr-Digest", "sha-256=:nope:"},
		{"bad Content-Digest", "Content-Digest", "sha-256=abc"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, _, _, _ := newWrite(t, false)
			resp, b := s.do(t, http.MethodPut, "/v1/sandboxes/web/files/content?path=/w/a.txt", map[string]string{tt.header: tt.value}, strings.NewReader(data))
			wantError(t, resp, b, http.StatusBadRequest, api.CodeInvalidArgument)
			wantNoCalls(t, s.fake)
		})
	}
}

func TestFileCalls(t *testing.T) {
	entry := api.FileEntry{Name: "b", Path: "/w/b", Type: api.FileTypeFile, Version: "v3"}
	t.Run("edit", func(t *testing.T) {
		s := newTestServer(t)
		var gotPath string
		var gotIfMatch []string
		var got api.EditFileRequest
		s.fake.EditFileFn = func(_ context.Context, _ files.Target, p string, ifMatch []string, req api.EditFileRequest) (api.FileEntry, error) {
			gotPath, gotIfMatch, got = p, ifMatch, req
			return entry, nil
		}
		edits := []api.FileEdit{{Old: "a", New: "b"}, {Old: "c", New: ""}}
		out, err := s.client.EditFile(t.Context(), "web", "/w/b", edits, cove.IfMatch("v2"))
		if err != nil {
			t.Fatal(err)
		}
		if gotPath != "/w/b" || !cmp.Equal([]string{"v2"}, gotIfMatch) || !cmp.Equal(api.EditFileRequest{Edits: edits}, got) {
			t.Errorf("edit got %q %q %+v", gotPath, gotIfMatch, got)
		}
		if !cmp.Equal(entry, out) {
			t.Errorf("answered %+v", out)
		}
	})
	t.Run("mkdir", func(t *testing.T) {
		s := newTestServer(t)
		var got api.MkdirRequest
		var gotUser string
		s.fake.MkdirFn = func(_ context.Context, _ files.Target, req api.MkdirRequest, user string) (api.FileEntry, error) {
			got, gotUser = req, user
			return entry, nil
		}
		out, err := s.client.Mkdir(t.Context(), "web", "/w/d", cove.AsUser("root"))
		if err != nil {
			t.Fatal(err)
		}
		if got.Path != "/w/d" || gotUser != "root" || !cmp.Equal(entry, out) {
			t.Errorf("mkdir got %+v as %q, answered %+v", got, gotUser, out)
		}
	})
	t.Run("move", func(t *testing.T) {
		s := newTestServer(t)
		var got api.MoveRequest
		s.fake.MoveFileFn = func(_ context.Context, _ files.Target, req api.MoveRequest, _ string) (api.FileEntry, error) {
			got = req
			return entry, nil
		}
		out, err := s.client.MoveFile(t.Context(), "web", "/w/a", "/w/b", cove.Overwrite())
		if err != nil {
			t.Fatal(err)
		}
		if want := (api.MoveRequest{From: "/w/a", To: "/w/b", Overwrite: true}); got != want || !cmp.Equal(entry, out) {
			t.Errorf("move got %+v, answered %+v", got, out)
		}
	})
	t.Run("delete", func(t *testing.T) {
		s := newTestServer(t)
		var gotPath string
		var gotRecursive bool
		s.fake.RemoveFileFn = func(_ context.Context, _ files.Target, p string, recursive bool) error {
			gotPath, gotRecursive = p, recursive
			return nil
		}
		if err := s.client.RemoveFile(t.Context(), "web", "/w/d", cove.Recursive()); err != nil {
			t.Fatal(err)
		}
		if gotPath != "/w/d" || !gotRecursive {
			t.Errorf("remove got %q recursive=%v", gotPath, gotRecursive)
		}
		resp, b := s.do(t, http.MethodDelete, "/v1/sandboxes/web/files?path=/w/d", nil, nil)
		if resp.StatusCode != http.StatusNoContent || gotRecursive {
			t.Errorf("answered %d (%s), recursive=%v", resp.StatusCode, b, gotRecursive)
		}
	})
	t.Run("list", func(t *testing.T) {
		s := newTestServer(t)
		var got files.ListQuery
		page := api.List[api.FileEntry]{Items: []api.FileEntry{entry}, NextCursor: "/w/b"}
		s.fake.ListFilesFn = func(_ context.Context, _ files.Target, q files.ListQuery) (api.List[api.FileEntry], error) {
			got = q
			return page, nil
		}
		out, err := s.client.ListFiles(t.Context(), "web", "/w", 3, 10, "/w/a")
		if err != nil {
			t.Fatal(err)
		}
		if want := (files.ListQuery{Path: "/w", Depth: 3, Limit: 10, Cursor: "/w/a"}); got != want {
			t.Errorf("query is %+v; want %+v", got, want)
		}
		if !cmp.Equal(page, out) {
			t.Errorf("answered %+v", out)
		}
		if _, err := s.client.ListFiles(t.Context(), "web", "/w", 0, 0, ""); err != nil {
			t.Fatal(err)
		}
		if want := (files.ListQuery{Path: "/w", Depth: 1, Limit: lifecycle.DefaultPageLimit}); got != want {
			t.Errorf("default query is %+v; want %+v", got, want)
		}
	})
}

// TestFileWake checks ?wake=false reaches every file call, and wake is the
// default.
func TestFileWake(t *testing.T) {
	tests := []struct {
		method string
		call   func(c *cove.Client, ctx context.Context, opts ...cove.FileOption) error
	}{
		{"ListFiles", func(c *cove.Client, ctx context.Context, o ...cove.FileOption) error {
			_, err := c.ListFiles(ctx, "web", "/w", 0, 0, "", o...)
			return err
		}},
		{"StatFile", func(c *cove.Client, ctx context.Context, o ...cove.FileOption) error {
			_, err := c.StatFile(ctx, "web", "/w/a", o...)
			return err
		}},
		{"ReadFile", func(c *cove.Client, ctx context.Context, o ...cove.FileOption) error {
			_, err := c.ReadFile(ctx, "web", "/w/a", o...)
			return err
		}},
		{"WriteFile", func(c *cove.Client, ctx context.Context, o ...cove.FileOption) error {
			_, err := c.WriteFile(ctx, "web", "/w/a", strings.NewReader("x"), o...)
			return err
		}},
		{"EditFile", func(c *cove.Client, ctx context.Context, o ...cove.FileOption) error {
			_, err := c.EditFile(ctx, "web", "/w/a", []api.FileEdit{{Old: "x", New: "y"}}, o...)
			return err
		}},
		{"Mkdir", func(c *cove.Client, ctx context.Context, o ...cove.FileOption) error {
			_, err := c.Mkdir(ctx, "web", "/w/d", o...)
			return err
		}},
		{"MoveFile", func(c *cove.Client, ctx context.Context, o ...cove.FileOption) error {
			_, err := c.MoveFile(ctx, "web", "/w/a", "/w/b", o...)
			return err
		}},
		{"RemoveFile", func(c *cove.Client, ctx context.Context, o ...cove.FileOption) error {
			return c.RemoveFile(ctx, "web", "/w/a", o...)
		}},
		{"ReadArchive", func(c *cove.Client, ctx context.Context, o ...cove.FileOption) error {
			_, err := c.ReadArchive(ctx, "web", "/w", o...)
			return err
		}},
		{"WriteArchive", func(c *cove.Client, ctx context.Context, o ...cove.FileOption) error {
			_, err := c.WriteArchive(ctx, "web", "/w", strings.NewReader(""), o...)
			return err
		}},
	}
	for _, tt := range tests {
		t.Run(tt.method, func(t *testing.T) {
			s := newTestServer(t)
			for _, wake := range []bool{true, false} {
				var opts []cove.FileOption
				if !wake {
					opts = append(opts, cove.NoWake())
				}
				// The fake answers not_found; the target is the point.
				wantCode(t, tt.call(s.client, t.Context(), opts...), api.CodeNotFound)
				want := files.Target{TeamID: teamA, Ref: "web", Wake: wake}
				if got := last(t, s.fake, tt.method).Target; got != want {
					t.Errorf("target is %+v; want %+v", got, want)
				}
			}
		})
	}
}

func TestFileQueryErrors(t *testing.T) {
	tests := []struct{ method, path string }{
		{http.MethodGet, "/v1/sandboxes/web/files/stat"},
		{http.MethodGet, "/v1/sandboxes/web/files/stat?path=/a&path=/b"},
		{http.MethodGet, "/v1/sandboxes/web/files/stat?path=/a&wake=maybe"},
		{http.MethodGet, "/v1/sandboxes/web/files/content"},
		{http.MethodGet, "/v1/sandboxes/web/files?path=/w&depth=0"},
		{http.MethodDelete, "/v1/sandboxes/web/files?path=/a&recursive=maybe"},
		{http.MethodPost, "/v1/sandboxes/web/files/mkdir?wake=2"},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			s := newTestServer(t)
			resp, body := s.do(t, tt.method, tt.path, nil, strings.NewReader(`{"path":"/d"}`))
			wantError(t, resp, body, http.StatusBadRequest, api.CodeInvalidArgument)
			wantNoCalls(t, s.fake)
		})
	}
}

// TestBadRequestBody checks that a body that is not one JSON object of the
// right shape, or too big, is refused before the control plane is asked.
func TestBadRequestBody(t *testing.T) {
	endpoints := []struct {
		method, path string
		emptyOK      bool
	}{
		{http.MethodPost, "/v1/sandboxes", true},
		{http.MethodPatch, "/v1/sandboxes/web", false},
		{http.MethodPost, "/v1/sandboxes/web/commands", false},
		{http.MethodPost, "/v1/sandboxes/web/commands/cmd_1/signal", false},
		{http.MethodPatch, "/v1/sandboxes/web/files/content?path=/w/a", false},
		{http.MethodPost, "/v1/sandboxes/web/files/mkdir", false},
		{http.MethodPost, "/v1/sandboxes/web/files/move", false},
		{http.MethodPost, "/v1/teams", false},
	}
	oversize := `{"name":"` + strings.Repeat("a", maxBody) + `"}`
	bodies := []struct {
		name, contentType, body string
		status                  int
		code                    api.Code
	}{
		{"syntax", "application/json", `{"name":`, 400, api.CodeInvalidArgument},
		{"garbage", "application/json", `hello`, 400, api.CodeInvalidArgument},
		{"unknown field", "application/json", `{"bogus":1}`, 400, api.CodeInvalidArgument},
		{"not an object", "application/json", `[1,2]`, 400, api.CodeInvalidArgument},
		{"trailing data", "application/json", `{} {}`, 400, api.CodeInvalidArgument},
		{"content type", "text/plain", `{}`, 400, api.CodeInvalidArgument},
		{"empty", "application/json", ``, 400, api.CodeInvalidArgument},
		{"oversize", "application/json", oversize, 413, api.CodePayloadTooLarge},
	}
	for _, ep := range endpoints {
		for _, b := range bodies {
			if b.name == "empty" && ep.emptyOK {
				continue
			}
			t.Run(ep.method+" "+ep.path+" "+b.name, func(t *testing.T) {
				s := newTestServer(t)
				resp, body := s.do(t, ep.method, ep.path, map[string]string{"Content-Type": b.contentType}, strings.NewReader(b.body))
				wantError(t, resp, body, b.status, b.code)
				wantNoCalls(t, s.fake)
			})
		}
	}
	t.Run("oversize with Idempotency-Key", func(t *testing.T) {
		s := newTestServer(t)
		resp, body := s.do(t, http.MethodPost, "/v1/sandboxes", map[string]string{"Idempotency-Key": "k1"}, strings.NewReader(oversize))
		wantError(t, resp, body, http.StatusRequestEntityTooLarge, api.CodePayloadTooLarge)
		wantNoCalls(t, s.fake)
	})
}

func TestIdempotencyKey(t *testing.T) {
	post := func(t *testing.T, s *testServer, key, path, body string) (*http.Response, []byte) {
		t.Helper()
		return s.do(t, http.MethodPost, path, map[string]string{"Idempotency-Key": key}, strings.NewReader(body))
	}
	t.Run("replay", func(t *testing.T) {
		s := newTestServer(t)
		resp, first := post(t, s, "k1", "/v1/sandboxes", `{"name":"a"}`)
		if resp.StatusCode != http.StatusCreated || resp.Header.Get("Idempotent-Replayed") != "" {
			t.Fatalf("first answer: %d, replayed %q: %s", resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), first)
		}
		if loc := resp.Header.Get("Location"); loc != "/v1/sandboxes/sbx_1" {
			t.Errorf("Location is %q", loc)
		}
		resp, again := post(t, s, "k1", "/v1/sandboxes", `{"name":"a"}`)
		if resp.StatusCode != http.StatusCreated || resp.Header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("replay: %d, replayed %q: %s", resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), again)
		}
		if !bytes.Equal(first, again) {
			t.Errorf("replay is %s; want %s", again, first)
		}
		if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("replay Content-Type is %q", ct)
		}
		if n := s.fake.Count("CreateSandbox"); n != 1 {
			t.Errorf("created %d sandboxes; want 1", n)
		}
		if c := last(t, s.fake, "Idempotently"); c.TeamID != teamA {
			t.Errorf("idempotency kept for team %q", c.TeamID)
		}

		resp, body := post(t, s, "k1", "/v1/sandboxes", `{"name":"b"}`)
		wantError(t, resp, body, http.StatusUnprocessableEntity, api.CodeUnprocessable)
		if n := s.fake.Count("CreateSandbox"); n != 1 {
			t.Errorf("created %d sandboxes after a reused key; want 1", n)
		}

		// Keys are the team's own.
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, s.url+"/v1/sandboxes", strings.NewReader(`{"name":"a"}`))
		req.Header.Set("Authorization", "Bearer "+keyB)
		req.Header.Set("Idempotency-Key", "k1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated || resp.Header.Get("Idempotent-Replayed") != "" {
			t.Errorf("team B with team A's key: %d, replayed %q", resp.StatusCode, resp.Header.Get("Idempotent-Replayed"))
		}
		if n := s.fake.Count("CreateSandbox"); n != 2 {
			t.Errorf("created %d sandboxes; want 2", n)
		}
	})
	t.Run("failure is not kept", func(t *testing.T) {
		s := newTestServer(t)
		var n atomic.Int32
		s.fake.CreateSandboxFn = func(_ context.Context, teamID string, req api.CreateSandboxRequest) (api.Sandbox, error) {
			if n.Add(1) == 1 {
				return api.Sandbox{}, api.Errorf(api.CodeResourceExhausted, "no room")
			}
			return api.Sandbox{ID: "sbx_2"}, nil
		}
		resp, body := post(t, s, "k2", "/v1/sandboxes", `{}`)
		wantError(t, resp, body, http.StatusTooManyRequests, api.CodeResourceExhausted)
		resp, body = post(t, s, "k2", "/v1/sandboxes", `{}`)
		if resp.StatusCode != http.StatusCreated || resp.Header.Get("Idempotent-Replayed") != "" {
			t.Errorf("retry: %d, replayed %q: %s", resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), body)
		}
	})
	t.Run("commands", func(t *testing.T) {
		s := newTestServer(t)
		s.fake.ExecFn = func(context.Context, string, string, bool, api.CreateCommandRequest) (api.Command, error) {
			return api.Command{ID: "cmd_1", SandboxID: "sbx_1"}, nil
		}
		for i, replayed := range []string{"", "true"} {
			resp, body := post(t, s, "k3", "/v1/sandboxes/web/commands", `{"command":"true"}`)
			if resp.StatusCode != http.StatusCreated || resp.Header.Get("Idempotent-Replayed") != replayed {
				t.Errorf("call %d: %d, replayed %q: %s", i, resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), body)
			}
		}
		if n := s.fake.Count("Exec"); n != 1 {
			t.Errorf("ran %d commands; want 1", n)
		}
	})
	t.Run("refused", func(t *testing.T) {
		tests := []struct {
			name, key, path string
			status          int
			code            api.Code
		}{
			{"too long", strings.Repeat("k", 256), "/v1/sandboxes", 400, api.CodeInvalidArgument},
			{"not printable", "k\t1", "/v1/sandboxes", 400, api.CodeInvalidArgument},
			{"team create holds a secret", "k4", "/v1/teams", 422, api.CodeUnprocessable},
			{"key create holds a secret", "k5", "/v1/teams/team_a/keys", 422, api.CodeUnprocessable},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				s := newTestServer(t)
				resp, body := post(t, s, tt.key, tt.path, `{"name":"x"}`)
				wantError(t, resp, body, tt.status, tt.code)
				wantNoCalls(t, s.fake)
			})
		}
	})
}
