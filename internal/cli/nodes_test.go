package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/cove-dev/cove/api"
)

// TestNodes: `cove nodes` lists, drains and removes through the API; an
// error (a non-admin key, a server without a fleet) is one readable line
// and a non-zero exit; token needs --rotate.
func TestNodes(t *testing.T) {
	admin := true
	var calls []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls = append(calls, r.Method+" "+r.URL.Path)
		w.Header().Set("Content-Type", "application/json")
		if !admin {
			w.WriteHeader(http.StatusForbidden)
			json.NewEncoder(w).Encode(api.ErrorResponse{Error: api.Errorf(api.CodePermissionDenied, "nodes are for operators: use the admin key")})
			return
		}
		switch r.Method + " " + r.URL.Path {
		case "GET /v1/nodes":
			json.NewEncoder(w).Encode(api.List[api.Node]{Items: []api.Node{{ID: "node_1", Name: "n1", State: api.NodeReady,
				Addr: "10.0.0.1:7443", Capacity: api.NodeCapacity{CPUs: 8, MemoryMiB: 16384}, Reserved: api.Resources{CPUs: 2, MemoryMiB: 2048}, Sandboxes: 2}}})
		case "POST /v1/nodes/n1/drain":
			json.NewEncoder(w).Encode(api.Node{ID: "node_1", Name: "n1", State: api.NodeDraining})
		case "DELETE /v1/nodes/n1":
			w.WriteHeader(http.StatusNoContent)
		default:
			w.WriteHeader(http.StatusNotFound)
			json.NewEncoder(w).Encode(api.ErrorResponse{Error: api.Errorf(api.CodeNotFound, "this server runs no fleet")})
		}
	}))
	defer srv.Close()
	run := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := Main(context.Background(), Env{
			Args: args, Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb,
			Getenv: func(k string) string {
				return map[string]string{"COVE_URL": srv.URL, "COVE_API_KEY": "k"}[k]
			},
		})
		return code, out.String(), errb.String()
	}
	if code, out, _ := run("nodes", "ls"); code != 0 || !strings.Contains(out, "n1") || !strings.Contains(out, "2/8") || !strings.Contains(out, "ready") {
		t.Fatalf("nodes ls: exit %d, %q", code, out)
	}
	if code, out, _ := run("nodes", "ls", "--json"); code != 0 || !strings.Contains(out, `"name": "n1"`) {
		t.Fatalf("nodes ls --json: exit %d, %q", code, out)
	}
	if code, out, _ := run("nodes", "drain", "n1"); code != 0 || !strings.Contains(out, "draining") {
		t.Fatalf("nodes drain: exit %d, %q", code, out)
	}
	if code, _, _ := run("nodes", "rm", "n1"); code != 0 || calls[len(calls)-1] != "DELETE /v1/nodes/n1" {
		t.Fatalf("nodes rm: exit %d, calls %v", code, calls)
	}
	n := len(calls)
	if code, _, errs := run("nodes", "token"); code == 0 || len(calls) != n || !strings.Contains(errs, "--rotate") {
		t.Fatalf("nodes token without --rotate: exit %d, %q, %d calls", code, errs, len(calls)-n)
	}
	for _, c := range []struct {
		admin bool
		args  []string
		want  string
	}{
		{false, []string{"nodes", "ls"}, "use the admin key"},
		{true, []string{"nodes", "token", "--rotate"}, "runs no fleet"},
	} {
		admin = c.admin
		code, _, errs := run(c.args...)
		if code == 0 || !strings.Contains(errs, c.want) || strings.Count(strings.TrimSpace(errs), "\n") != 0 {
			t.Errorf("%v: exit %d, stderr %q; want one line with %q", c.args, code, errs, c.want)
		}
	}
}
