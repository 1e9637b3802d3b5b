package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/lifecycle"
)

const keyAdmin = "cove_key_admin"

// fakeNodes is a fleet of one node, n1, holding sbx_1.
type fakeNodes struct{ removed []string }

func (f *fakeNodes) Nodes(ctx context.Context) ([]api.Node, error) {
	return []api.Node{{ID: "node_1", Name: "n1", State: api.NodeReady, Sandboxes: 1}}, nil
}

func (f *fakeNodes) Drain(ctx context.Context, ref string) (api.Node, error) {
	if ref != "n1" && ref != "node_1" {
		return api.Node{}, api.Errorf(api.CodeNotFound, "node %s not found", ref)
	}
	return api.Node{ID: "node_1", Name: "n1", State: api.NodeDraining}, nil
}

func (f *fakeNodes) Undrain(ctx context.Context, ref string) (api.Node, error) {
	return api.Node{ID: "node_1", Name: "n1", State: api.NodeReady}, nil
}

func (f *fakeNodes) Remove(ctx context.Context, ref string) error {
	f.removed = append(f.removed, ref)
	return nil
}

func (f *fakeNodes) SandboxNode(id string) (api.SandboxNode, bool) {
	if id != "sbx_1" {
		return api.SandboxNode{}, false
	}
	return api.SandboxNode{ID: "node_1", Name: "n1"}, true
}

type fakeTokens struct{}

func (fakeTokens) RotateJoinToken(ctx context.Context) (api.JoinToken, error) {
	return api.JoinToken{Token: "cove-join-x-y", ExpiresAt: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}, nil
}

// newFleetServer is the test server with a fleet and an admin key.
func newFleetServer(t *testing.T, fleet bool) (*testServer, *fakeNodes) {
	t.Helper()
	s := newTestServer(t)
	nodes := &fakeNodes{}
	if fleet {
		s.h.Nodes, s.h.JoinTokens = nodes, fakeTokens{}
	}
	s.fake.AuthenticateFn = func(ctx context.Context, key string) (lifecycle.Principal, error) {
		switch key {
		case keyAdmin:
			return lifecycle.Principal{Team: api.Team{ID: "team_admin", Name: "admin"}, KeyID: "key_admin"}, nil
		case keyA:
			return lifecycle.Principal{Team: api.Team{ID: teamA, Name: "a"}, KeyID: "key_a"}, nil
		}
		return lifecycle.Principal{}, api.Errorf(api.CodeUnauthenticated, "the API key is not valid")
	}
	sb := func(ctx context.Context, teamID, ref string) (api.Sandbox, error) {
		return api.Sandbox{ID: "sbx_1", TeamID: teamID, State: api.StateRunning}, nil
	}
	s.fake.GetSandboxFn = sb
	s.fake.ListSandboxesFn = func(ctx context.Context, teamID string, q lifecycle.SandboxQuery) (api.List[api.Sandbox], error) {
		x, _ := sb(ctx, teamID, "sbx_1")
		return api.List[api.Sandbox]{Items: []api.Sandbox{x}}, nil
	}
	return s, nodes
}

func (s *testServer) doAs(t *testing.T, key, method, path string) (*http.Response, []byte) {
	t.Helper()
	return s.do(t, method, path, map[string]string{"Authorization": "Bearer " + key}, nil)
}

// TestNodesAdminOnly: every node route refuses a key of another team with
// permission_denied, before anything reaches the fleet; the admin team's
// key works; a server without a fleet says so with not_found.
func TestNodesAdminOnly(t *testing.T) {
	routes := []struct{ method, path string }{
		{"GET", "/v1/nodes"},
		{"POST", "/v1/nodes/n1/drain"},
		{"POST", "/v1/nodes/n1/undrain"},
		{"DELETE", "/v1/nodes/n1"},
		{"POST", "/v1/nodes/join-token"},
	}
	s, nodes := newFleetServer(t, true)
	for _, r := range routes {
		resp, body := s.doAs(t, keyA, r.method, r.path)
		wantError(t, resp, body, http.StatusForbidden, api.CodePermissionDenied)
	}
	if len(nodes.removed) != 0 {
		t.Fatalf("a non-admin key removed nodes %v", nodes.removed)
	}
	want := map[string]int{"GET": 200, "POST": 200, "DELETE": 204}
	for _, r := range routes {
		resp, body := s.doAs(t, keyAdmin, r.method, r.path)
		if resp.StatusCode != want[r.method] {
			t.Fatalf("admin %s %s = %d %s", r.method, r.path, resp.StatusCode, body)
		}
	}
	resp, body := s.doAs(t, keyAdmin, "GET", "/v1/nodes")
	var l api.List[api.Node]
	if err := json.Unmarshal(body, &l); err != nil || len(l.Items) != 1 || l.Items[0].Name != "n1" {
		t.Fatalf("GET /v1/nodes = %d %s (%v)", resp.StatusCode, body, err)
	}
	resp, body = s.doAs(t, keyAdmin, "POST", "/v1/nodes/nope/drain")
	wantError(t, resp, body, http.StatusNotFound, api.CodeNotFound)

	plain, _ := newFleetServer(t, false)
	for _, r := range routes {
		resp, body := plain.doAs(t, keyAdmin, r.method, r.path)
		e := wantError(t, resp, body, http.StatusNotFound, api.CodeNotFound)
		if !strings.Contains(e.Message, "runs no fleet") {
			t.Fatalf("%s %s without a fleet: %q", r.method, r.path, e.Message)
		}
	}
}

// TestSandboxNodeAdminOnly: the admin team sees the node a sandbox runs
// on; another team's key never does, in a get or a list.
func TestSandboxNodeAdminOnly(t *testing.T) {
	s, _ := newFleetServer(t, true)
	for _, path := range []string{"/v1/sandboxes/sbx_1", "/v1/sandboxes"} {
		_, body := s.doAs(t, keyA, "GET", path)
		if strings.Contains(string(body), `"node"`) || strings.Contains(string(body), "node_1") {
			t.Fatalf("team a sees the node in %s: %s", path, body)
		}
		_, body = s.doAs(t, keyAdmin, "GET", path)
		if !strings.Contains(string(body), `"node":{"id":"node_1","name":"n1"}`) {
			t.Fatalf("admin does not see the node in %s: %s", path, body)
		}
	}
}
