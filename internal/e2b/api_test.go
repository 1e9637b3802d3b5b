package e2b

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
)

type harness struct {
	t      *testing.T
	plane  *fakePlane
	cmds   *fakeCommands
	files  *fakeFiles
	tokens *Tokens
	api    *httptest.Server
	side   *httptest.Server
	// sandboxSide is the handler side serves.
	sandboxSide *SandboxSide
	now         time.Time
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	tokens, err := NewTokens(bytes.Repeat([]byte{7}, 32))
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, tokens: tokens, now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	clock := func() time.Time { return h.now }
	h.plane = &fakePlane{now: clock}
	h.cmds = &fakeCommands{}
	h.files = newFakeFiles()
	log := slog.New(slog.DiscardHandler)
	cfg := Config{Templates: map[string]string{"base": "managed"}}
	h.api = httptest.NewServer(NewAPI(cfg, h.plane, h.plane, h.plane, tokens, log, clock))
	h.sandboxSide = NewSandboxSide(h.plane, h.cmds, h.files, tokens, planeStore{h.plane}, log)
	h.side = httptest.NewServer(h.sandboxSide)
	t.Cleanup(h.api.Close)
	t.Cleanup(h.side.Close)
	return h
}

// do sends a request to the API with key (none when ""), and decodes the
// answer into out unless it is nil.
func (h *harness) do(method, path, key string, body any, out any) *http.Response {
	h.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, h.api.URL+path, rd)
	if key != "" {
		req.Header.Set("X-API-Key", key)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			h.t.Fatalf("%s %s: %d %q: %v", method, path, resp.StatusCode, b, err)
		}
	}
	return resp
}

// wantError checks an E2B error answer: status and the same code in the
// body, for E2B's SDKs test the body's code.
func (h *harness) wantError(method, path, key string, body any, status int) {
	h.t.Helper()
	var e errorBody
	resp := h.do(method, path, key, body, &e)
	if resp.StatusCode != status || e.Code != status || e.Message == "" {
		h.t.Errorf("%s %s: %d %+v; want %d with code %d in the body", method, path, resp.StatusCode, e, status, status)
	}
}

func (h *harness) create(key string, body map[string]any) sandboxJSON {
	h.t.Helper()
	var sb sandboxJSON
	if resp := h.do("POST", "/sandboxes", key, body, &sb); resp.StatusCode != http.StatusCreated {
		h.t.Fatalf("create: %d %+v", resp.StatusCode, sb)
	}
	return sb
}

func (h *harness) create2(key string, body map[string]any) sandboxJSON {
	h.t.Helper()
	var sb sandboxJSON
	if resp := h.do("POST", "/v2/sandboxes", key, body, &sb); resp.StatusCode != http.StatusCreated {
		h.t.Fatalf("create: %d %+v", resp.StatusCode, sb)
	}
	return sb
}

func TestCreate(t *testing.T) {
	h := newHarness(t)
	sb := h.create("key-a", map[string]any{
		"templateID": "base", "timeout": 60, "secure": false, "allow_internet_access": true,
		"metadata": map[string]string{"app": "x"}, "envVars": map[string]string{"A": "1"},
		"mcp": nil, "autoPause": false, // taken and ignored, as E2B's newer fields
	})
	if sb.SandboxID == "" || sb.TemplateID != "base" || sb.ClientID == "" || sb.EnvdVersion != EnvdVersion {
		t.Errorf("create answered %+v", sb)
	}
	// secure:false still gets a token: the ID alone must open nothing.
	if team, ok := h.tokens.Team(sb.SandboxID, sb.EnvdAccessToken); !ok || team != "a" {
		t.Errorf("the access token %q is not the sandbox's", sb.EnvdAccessToken)
	}
	req := h.plane.created[0]
	if req.Template != "managed" || req.Env["A"] != "1" || req.Labels["app"] != "x" || req.Labels[labelTemplate] != "base" ||
		req.MaxLifetimeS == nil || *req.MaxLifetimeS != 60 || req.Network != nil {
		t.Errorf("cove was asked %+v", req)
	}
	if got := h.plane.sandboxes[0].State; got != api.StateRunning {
		t.Errorf("create answered before the sandbox ran (%s)", got)
	}

	var d detailJSON
	if resp := h.do("GET", "/sandboxes/"+sb.SandboxID, "key-a", nil, &d); resp.StatusCode != 200 {
		t.Fatalf("get: %d", resp.StatusCode)
	}
	if d.State != "running" || d.TemplateID != "base" || d.Metadata["app"] != "x" || len(d.Metadata) != 1 ||
		d.CPUCount != 1 || d.MemoryMB != 512 || d.EnvdAccessToken != sb.EnvdAccessToken || !d.EndAt.Equal(h.now.Add(time.Minute)) {
		t.Errorf("get answered %+v", d)
	}

	h.wantError("POST", "/sandboxes", "key-a", map[string]any{"timeout": 10}, 400)
	h.wantError("POST", "/v2/sandboxes", "key-a", map[string]any{"templateID": "base", "timeout": -1}, 400)
	// E2B's newer SDKs create through /v2 and may leave the timeout out:
	// five minutes, as they document.
	h.create2("key-a", map[string]any{"templateID": "base"})
	if req := h.plane.created[1]; *req.MaxLifetimeS != 300 {
		t.Errorf("a create without a timeout: lifetime %d; want 300", *req.MaxLifetimeS)
	}
	h.wantError("POST", "/sandboxes", "key-a", map[string]any{"templateID": "base", "metadata": map[string]string{"e2b/template": "x"}}, 400)
}

// TestCreateSetID: every E2B create asks for a sandbox whose set-uid
// programs work (sudo), whatever the request says; nothing a client
// sends turns it off or on.
func TestCreateSetID(t *testing.T) {
	h := newHarness(t)
	h.create("key-a", map[string]any{"templateID": "base"})
	h.create2("key-a", map[string]any{"templateID": "other", "SetID": false, "set_id": false, "metadata": map[string]string{"SetID": "false"}})
	if len(h.plane.opts) != 2 {
		t.Fatalf("%d creates reached cove; want 2", len(h.plane.opts))
	}
	for i, o := range h.plane.opts {
		if !o.SetID {
			t.Errorf("create %d asked for %+v; want SetID", i, o)
		}
	}
}

// TestBaseTemplate: base is the managed template when no mapping names
// it, and a mapping wins over that; other names pass as they are.
func TestBaseTemplate(t *testing.T) {
	for _, tt := range []struct {
		templates  map[string]string
		name, want string
	}{
		{nil, "base", "managed"},
		{map[string]string{"base": "busybox"}, "base", "busybox"},
		{nil, "python", "python"},
		{map[string]string{"python": "managed"}, "python", "managed"},
	} {
		if got := (Config{Templates: tt.templates}).coveTemplate(tt.name); got != tt.want {
			t.Errorf("%v: %s stands for %q; want %q", tt.templates, tt.name, got, tt.want)
		}
	}
}

// TestAuthentication: every route needs a key of the sandbox's team;
// another team's sandbox is not found.
func TestAuthentication(t *testing.T) {
	h := newHarness(t)
	sb := h.create("key-a", map[string]any{"templateID": "base"})
	for _, path := range []string{"/sandboxes/" + sb.SandboxID, "/v2/sandboxes", "/sandboxes", "/nothing"} {
		h.wantError("GET", path, "", nil, 401)
		h.wantError("GET", path, "bad", nil, 401)
	}
	h.wantError("POST", "/sandboxes", "", map[string]any{"templateID": "base"}, 401)
	for _, r := range []struct{ method, path string }{
		{"GET", "/sandboxes/" + sb.SandboxID},
		{"DELETE", "/sandboxes/" + sb.SandboxID},
		{"POST", "/sandboxes/" + sb.SandboxID + "/pause"},
		{"POST", "/sandboxes/" + sb.SandboxID + "/timeout"},
		{"POST", "/sandboxes/" + sb.SandboxID + "/connect"},
		{"GET", "/sandboxes/" + sb.SandboxID + "/metrics"},
	} {
		h.wantError(r.method, r.path, "key-b", map[string]any{"timeout": 30}, 404)
	}
	var list []detailJSON
	h.do("GET", "/v2/sandboxes", "key-b", nil, &list)
	if len(list) != 0 {
		t.Errorf("team b lists %+v", list)
	}
	if h.plane.sandboxes[0].State != api.StateRunning {
		t.Errorf("another team's calls changed the sandbox: %s", h.plane.sandboxes[0].State)
	}
}

func TestKill(t *testing.T) {
	h := newHarness(t)
	sb := h.create("key-a", map[string]any{"templateID": "base"})
	if resp := h.do("DELETE", "/sandboxes/"+sb.SandboxID, "key-a", nil, nil); resp.StatusCode != 204 {
		t.Fatalf("kill: %d", resp.StatusCode)
	}
	h.wantError("DELETE", "/sandboxes/"+sb.SandboxID, "key-a", nil, 404)
	h.wantError("GET", "/sandboxes/"+sb.SandboxID, "key-a", nil, 404)
	h.wantError("DELETE", "/sandboxes/sbx_none", "key-a", nil, 404)
}

func TestPauseConnect(t *testing.T) {
	h := newHarness(t)
	sb := h.create("key-a", map[string]any{"templateID": "base", "timeout": 10})
	path := "/sandboxes/" + sb.SandboxID
	if resp := h.do("POST", path+"/pause", "key-a", map[string]any{"memory": true}, nil); resp.StatusCode != 204 {
		t.Fatalf("pause: %d", resp.StatusCode)
	}
	if got := h.plane.sandboxes[0].State; got != api.StateAsleep {
		t.Fatalf("pause answered with the sandbox %s", got)
	}
	h.wantError("POST", path+"/pause", "key-a", nil, 409)
	var d detailJSON
	h.do("GET", path, "key-a", nil, &d)
	if d.State != "paused" {
		t.Errorf("a paused sandbox is %q", d.State)
	}

	h.now = h.now.Add(5 * time.Second)
	var c sandboxJSON
	if resp := h.do("POST", path+"/connect", "key-a", map[string]any{"timeout": 100}, &c); resp.StatusCode != 201 {
		t.Fatalf("connect to a paused sandbox: %d; want 201", resp.StatusCode)
	}
	if c.SandboxID != sb.SandboxID || c.EnvdAccessToken != sb.EnvdAccessToken || h.plane.sandboxes[0].State != api.StateRunning {
		t.Errorf("connect answered %+v, the sandbox %s", c, h.plane.sandboxes[0].State)
	}
	if got := h.plane.sandboxes[0].MaxLifetimeS; got != 105 {
		t.Errorf("connect's timeout: lifetime %d; want 105 (5 s lived, 100 to go)", got)
	}
	// Connect only extends.
	if resp := h.do("POST", "/v2"+path+"/connect", "key-a", map[string]any{"timeout": 1}, &c); resp.StatusCode != 200 {
		t.Fatalf("connect to a running sandbox: %d; want 200", resp.StatusCode)
	}
	if got := h.plane.sandboxes[0].MaxLifetimeS; got != 105 {
		t.Errorf("connect shortened the lifetime to %d", got)
	}
	// The timeout is set from now, either way.
	h.now = h.now.Add(10 * time.Second)
	if resp := h.do("POST", path+"/timeout", "key-a", map[string]any{"timeout": 2}, nil); resp.StatusCode != 204 {
		t.Fatalf("timeout: %d", resp.StatusCode)
	}
	if got := h.plane.sandboxes[0].MaxLifetimeS; got != 17 {
		t.Errorf("timeout: lifetime %d; want 17", got)
	}
	h.wantError("POST", path+"/timeout", "key-a", map[string]any{}, 400)
	h.wantError("POST", "/sandboxes/sbx_none/connect", "key-a", map[string]any{"timeout": 1}, 404)
}

func TestList(t *testing.T) {
	h := newHarness(t)
	var ids []string
	for i := range 5 {
		md := map[string]string{"n": string(rune('0' + i)), "odd": map[bool]string{true: "yes", false: "no"}[i%2 == 1]}
		ids = append(ids, h.create("key-a", map[string]any{"templateID": "base", "metadata": md}).SandboxID)
	}
	h.create("key-b", map[string]any{"templateID": "base"})
	h.do("POST", "/sandboxes/"+ids[1]+"/pause", "key-a", nil, nil)
	h.do("DELETE", "/sandboxes/"+ids[4], "key-a", nil, nil)

	var got []string
	token := ""
	pages := 0
	for {
		var page []detailJSON
		resp := h.do("GET", "/v2/sandboxes?limit=2&nextToken="+token, "key-a", nil, &page)
		for _, d := range page {
			got = append(got, d.SandboxID)
		}
		pages++
		if token = resp.Header.Get("X-Next-Token"); token == "" {
			break
		}
	}
	if strings.Join(got, ",") != strings.Join(ids[:4], ",") || pages != 2 {
		t.Errorf("paged list: %v in %d pages; want %v in 2", got, pages, ids[:4])
	}
	for _, tc := range []struct {
		query string
		want  []string
	}{
		{"state=paused", ids[1:2]},
		{"state=running", []string{ids[0], ids[2], ids[3]}},
		{"state=running,paused&metadata=odd%3Dyes", []string{ids[1], ids[3]}},
		{"metadata=odd%3Dyes%26n%3D3", ids[3:4]},
	} {
		var page []detailJSON
		h.do("GET", "/v2/sandboxes?"+tc.query, "key-a", nil, &page)
		var got []string
		for _, d := range page {
			got = append(got, d.SandboxID)
			if d.EnvdAccessToken != "" {
				t.Errorf("a list shows the access token of %s", d.SandboxID)
			}
		}
		if strings.Join(got, ",") != strings.Join(tc.want, ",") {
			t.Errorf("%s: %v; want %v", tc.query, got, tc.want)
		}
	}
	h.wantError("GET", "/v2/sandboxes?state=dead", "key-a", nil, 400)
	var running []detailJSON
	h.do("GET", "/sandboxes", "key-a", nil, &running)
	if len(running) != 3 {
		t.Errorf("GET /sandboxes lists %d; want the 3 running", len(running))
	}
}

func TestMetrics(t *testing.T) {
	h := newHarness(t)
	sb := h.create("key-a", map[string]any{"templateID": "base"})
	var m []metricJSON
	if resp := h.do("GET", "/sandboxes/"+sb.SandboxID+"/metrics?start=1", "key-a", nil, &m); resp.StatusCode != 200 {
		t.Fatalf("metrics: %d", resp.StatusCode)
	}
	want := metricJSON{Timestamp: time.Unix(1000, 0).UTC(), TimestampUnix: 1000, CPUCount: 1, CPUUsedPct: 50,
		MemUsed: 100 << 20, MemTotal: 512 << 20, DiskUsed: 10 << 20, DiskTotal: 1024 << 20}
	if len(m) != 1 || m[0] != want {
		t.Errorf("metrics %+v; want %+v", m, want)
	}
	h.wantError("GET", "/sandboxes/"+sb.SandboxID+"/metrics?start=x", "key-a", nil, 400)
}

// TestSandboxSide: the sandbox listener lets a request in only with the
// sandbox's own token; an ID alone, another sandbox's token or a forged
// one opens nothing.
func TestSandboxSide(t *testing.T) {
	h := newHarness(t)
	a := h.create("key-a", map[string]any{"templateID": "base"})
	b := h.create("key-b", map[string]any{"templateID": "base"})
	health := func(id, token string) int {
		req, _ := http.NewRequest("GET", h.side.URL+"/health", nil)
		if id != "" {
			req.Header.Set("E2b-Sandbox-Id", id)
		}
		if token != "" {
			req.Header.Set("X-Access-Token", token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	forged := "a." + strings.Repeat("0", 64)
	for _, tc := range []struct {
		name, id, token string
		want            int
	}{
		{"own token", a.SandboxID, a.EnvdAccessToken, 204},
		{"no token", a.SandboxID, "", 401},
		{"another sandbox's token", a.SandboxID, b.EnvdAccessToken, 401},
		{"a forged token", a.SandboxID, forged, 401},
		{"the team's MAC under another team", a.SandboxID, "b." + strings.TrimPrefix(a.EnvdAccessToken, "a."), 401},
		{"no sandbox", "", a.EnvdAccessToken, 400},
	} {
		if got := health(tc.id, tc.token); got != tc.want {
			t.Errorf("%s: %d; want %d", tc.name, got, tc.want)
		}
	}
	h.do("DELETE", "/sandboxes/"+a.SandboxID, "key-a", nil, nil)
	if got := health(a.SandboxID, a.EnvdAccessToken); got != http.StatusBadGateway {
		t.Errorf("a killed sandbox's health: %d; want 502", got)
	}
}
