package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
)

// volumeServer is a stand-in API for the CLI's volume calls: it records
// each request (method, path and query, body) and answers from a map of
// volumes by name; a volume with sandboxes is not deleted (409 naming
// them, as the server does).
type volumeServer struct {
	*httptest.Server
	mu    sync.Mutex
	calls []string
	body  map[string]string // the last body per "METHOD path"
	vols  map[string]api.Volume
}

func newVolumeServer(t *testing.T) *volumeServer {
	vs := &volumeServer{body: map[string]string{}, vols: map[string]api.Volume{}}
	vs.Server = httptest.NewServer(http.HandlerFunc(vs.serve))
	t.Cleanup(vs.Close)
	return vs
}

func (vs *volumeServer) serve(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	vs.mu.Lock()
	defer vs.mu.Unlock()
	call := r.Method + " " + r.URL.Path
	vs.calls = append(vs.calls, call+"?"+r.URL.RawQuery)
	vs.body[call] = string(b)
	w.Header().Set("Content-Type", "application/json")
	fail := func(status int, err *api.Error) {
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(api.ErrorResponse{Error: err})
	}
	find := func(ref string) (api.Volume, bool) {
		for _, v := range vs.vols {
			if v.ID == ref || v.Name == ref {
				return v, true
			}
		}
		return api.Volume{}, false
	}
	ref := strings.TrimPrefix(r.URL.Path, "/v1/volumes/")
	switch {
	case call == "POST /v1/volumes":
		var req api.CreateVolumeRequest
		json.Unmarshal(b, &req)
		if _, dup := vs.vols[req.Name]; dup {
			fail(http.StatusConflict, api.Errorf(api.CodeConflict, "a volume named %q already exists", req.Name))
			return
		}
		v := api.Volume{ID: "vol_" + req.Name, TeamID: "team_1", Name: req.Name, SizeMiB: req.SizeMiB, Sandboxes: []string{},
			CreatedAt: time.Date(2026, 12, 3, 11, 0, 0, 0, time.UTC)}
		vs.vols[req.Name] = v
		w.WriteHeader(http.StatusCreated)
		json.NewEncoder(w).Encode(v)
	case call == "GET /v1/volumes":
		// Pages of one, so that ls follows the cursor.
		l := api.List[api.Volume]{Items: []api.Volume{}}
		names := []string{}
		for n := range vs.vols {
			names = append(names, n)
		}
		sort.Strings(names)
		after := r.URL.Query().Get("cursor")
		for i, n := range names {
			if n > after {
				l.Items = append(l.Items, vs.vols[n])
				if i < len(names)-1 {
					l.NextCursor = n
				}
				break
			}
		}
		json.NewEncoder(w).Encode(l)
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/v1/volumes/"):
		v, ok := find(ref)
		if !ok {
			fail(http.StatusNotFound, api.Errorf(api.CodeNotFound, "volume %s not found", ref))
			return
		}
		json.NewEncoder(w).Encode(v)
	case r.Method == http.MethodDelete && strings.HasPrefix(r.URL.Path, "/v1/volumes/"):
		v, ok := find(ref)
		if !ok {
			fail(http.StatusNotFound, api.Errorf(api.CodeNotFound, "volume %s not found", ref))
			return
		}
		if len(v.Sandboxes) > 0 {
			e := api.Errorf(api.CodeConflict, "volume %s is mounted by %s", v.ID, strings.Join(v.Sandboxes, ", "))
			e.Details = map[string]any{"sandboxes": v.Sandboxes}
			fail(http.StatusConflict, e)
			return
		}
		delete(vs.vols, v.Name)
		w.WriteHeader(http.StatusNoContent)
	case call == "POST /v1/sandboxes":
		var req api.CreateSandboxRequest
		json.Unmarshal(b, &req)
		sb := api.Sandbox{ID: "sbx_1", Name: req.Name, State: api.StateCreating}
		for _, m := range req.Volumes {
			v, ok := find(m.Name)
			if !ok {
				fail(http.StatusNotFound, api.Errorf(api.CodeNotFound, "volume %s not found", m.Name))
				return
			}
			m.VolumeID = v.ID
			sb.Volumes = append(sb.Volumes, m)
			v.Sandboxes = append(v.Sandboxes, sb.ID)
			vs.vols[v.Name] = v
		}
		w.WriteHeader(http.StatusCreated)
		json.NewEncoder(w).Encode(sb)
	default:
		fail(http.StatusNotFound, api.Errorf(api.CodeNotFound, "no route %s", call))
	}
}

func (vs *volumeServer) run(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := Main(context.Background(), Env{
		Args: args, Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb,
		Getenv: func(k string) string {
			return map[string]string{"COVE_URL": vs.URL, "COVE_API_KEY": "k"}[k]
		},
	})
	return code, out.String(), errb.String()
}

func (vs *volumeServer) ncalls() int {
	vs.mu.Lock()
	defer vs.mu.Unlock()
	return len(vs.calls)
}

func (vs *volumeServer) lastBody(call string) string {
	vs.mu.Lock()
	defer vs.mu.Unlock()
	return vs.body[call]
}

// TestVolumeCommands: `cove volume` creates, lists (every page), shows
// and deletes volumes through the API; a volume a sandbox mounts is not
// deleted, and the error is one line naming the sandbox.
func TestVolumeCommands(t *testing.T) {
	vs := newVolumeServer(t)
	if code, out, errs := vs.run("volume", "create", "cache", "--size", "64"); code != 0 || out != "vol_cache cache 64\n" {
		t.Fatalf("volume create: exit %d, %q, %q", code, out, errs)
	}
	if got := vs.lastBody("POST /v1/volumes"); strings.TrimSpace(got) != `{"name":"cache","size_mib":64}` {
		t.Fatalf("volume create sent %s", got)
	}
	if code, out, errs := vs.run("volume", "create", "data", "--size", "32", "--json"); code != 0 || !strings.Contains(out, `"id": "vol_data"`) {
		t.Fatalf("volume create --json: exit %d, %q, %q", code, out, errs)
	}
	code, out, errs := vs.run("volume", "ls")
	if code != 0 || !strings.Contains(out, "vol_cache") || !strings.Contains(out, "vol_data") || !strings.HasPrefix(out, "ID") {
		t.Fatalf("volume ls: exit %d, %q, %q", code, out, errs)
	}
	code, out, _ = vs.run("volume", "list", "--json")
	var l api.List[api.Volume]
	if err := json.Unmarshal([]byte(out), &l); code != 0 || err != nil || len(l.Items) != 2 {
		t.Fatalf("volume list --json: exit %d, %v, %q", code, err, out)
	}
	code, out, _ = vs.run("volume", "get", "cache")
	var v api.Volume
	if err := json.Unmarshal([]byte(out), &v); code != 0 || err != nil || v.ID != "vol_cache" || v.SizeMiB != 64 {
		t.Fatalf("volume get: exit %d, %v, %q", code, err, out)
	}
	// Mounted by a sandbox: cove create --volume, then rm is refused.
	if code, out, errs := vs.run("create", "--no-wait", "--volume", "cache:/cache", "--volume", "data:/data:ro"); code != 0 || out != "sbx_1\n" {
		t.Fatalf("create --volume: exit %d, %q, %q", code, out, errs)
	}
	var req api.CreateSandboxRequest
	json.Unmarshal([]byte(vs.lastBody("POST /v1/sandboxes")), &req)
	if want := []api.VolumeMount{{Name: "cache", Path: "/cache"}, {Name: "data", Path: "/data", ReadOnly: true}}; !reflect.DeepEqual(req.Volumes, want) {
		t.Fatalf("create --volume sent %+v, want %+v", req.Volumes, want)
	}
	code, out, errs = vs.run("volume", "rm", "cache")
	if code == 0 || !strings.Contains(errs, "sbx_1") || strings.Count(strings.TrimSpace(errs), "\n") != 0 {
		t.Fatalf("volume rm of a mounted volume: exit %d, %q, stderr %q; want one line naming sbx_1", code, out, errs)
	}
	vs.mu.Lock()
	c := vs.vols["cache"]
	c.Sandboxes = nil
	vs.vols["cache"] = c
	vs.mu.Unlock()
	if code, out, errs := vs.run("volume", "delete", "cache"); code != 0 || out != "cache deleted\n" {
		t.Fatalf("volume delete: exit %d, %q, %q", code, out, errs)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"volume", "get", "cache"}, "not found"},
		{[]string{"volume", "create", "data", "--size", "32"}, "already exists"},
		{[]string{"create", "--no-wait", "--volume", "nope:/x"}, "volume nope not found"},
	} {
		code, _, errs := vs.run(c.args...)
		if code == 0 || !strings.Contains(errs, c.want) || strings.Count(strings.TrimSpace(errs), "\n") != 0 {
			t.Errorf("%v: exit %d, stderr %q; want one line with %q", c.args, code, errs, c.want)
		}
	}
}

// TestVolumeBadInput: a bad --volume or a volume create without --size is
// one readable line and a non-zero exit, and nothing is sent.
func TestVolumeBadInput(t *testing.T) {
	vs := newVolumeServer(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"create", "--volume", "cache"}, `--volume "cache" must look like NAME:/PATH`},
		{[]string{"create", "--volume", ":/data"}, `--volume ":/data" must look like`},
		{[]string{"create", "--volume", "cache:data"}, `--volume "cache:data" must look like`},
		{[]string{"create", "--volume", "cache:"}, `--volume "cache:" must look like`},
		{[]string{"create", "--volume", "cache:ro"}, `--volume "cache:ro" must look like`},
		{[]string{"volume", "create", "cache"}, "needs --size"},
		{[]string{"volume", "create", "cache", "--size", "lots"}, "invalid argument"},
		{[]string{"volume", "create"}, "accepts 1 arg"},
		{[]string{"volume", "rm"}, "requires at least 1 arg"},
	} {
		code, _, errs := vs.run(c.args...)
		if code == 0 || !strings.Contains(errs, c.want) || strings.Count(strings.TrimSpace(errs), "\n") != 0 {
			t.Errorf("%v: exit %d, stderr %q; want one line with %q", c.args, code, errs, c.want)
		}
	}
	if n := vs.ncalls(); n != 0 {
		t.Errorf("bad input sent %d requests: %v", n, vs.calls)
	}
}

// TestVolumeMounts: the --volume syntax.
func TestVolumeMounts(t *testing.T) {
	for _, c := range []struct {
		in   []string
		want []api.VolumeMount
		bad  bool
	}{
		{in: nil, want: nil},
		{in: []string{"cache:/cache"}, want: []api.VolumeMount{{Name: "cache", Path: "/cache"}}},
		{in: []string{"cache:/cache:ro"}, want: []api.VolumeMount{{Name: "cache", Path: "/cache", ReadOnly: true}}},
		{in: []string{"cache:/cache:rw"}, want: []api.VolumeMount{{Name: "cache", Path: "/cache"}}},
		{in: []string{"vol_abc:/a:b"}, want: []api.VolumeMount{{Name: "vol_abc", Path: "/a:b"}}},
		{in: []string{"a:/x", "b:/y:ro"}, want: []api.VolumeMount{{Name: "a", Path: "/x"}, {Name: "b", Path: "/y", ReadOnly: true}}},
		{in: []string{"cache"}, bad: true},
		{in: []string{"cache:"}, bad: true},
		{in: []string{":/x"}, bad: true},
		{in: []string{"cache:x"}, bad: true},
		{in: []string{"cache::ro"}, bad: true},
	} {
		got, err := volumeMounts(c.in)
		if c.bad != (err != nil) || (!c.bad && !reflect.DeepEqual(got, c.want)) {
			t.Errorf("volumeMounts(%q) = %+v, %v; want %+v (bad %v)", c.in, got, err, c.want, c.bad)
		}
	}
}
