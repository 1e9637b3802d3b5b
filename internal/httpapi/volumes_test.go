package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/lifecycle"
)

// fakeVolumes keeps volumes per team, as the core does: another team's
// is not found, and one with sandboxes is not deleted.
type fakeVolumes struct {
	mu sync.Mutex
	n  int
	vs []api.Volume
}

func (f *fakeVolumes) CreateVolume(ctx context.Context, teamID string, req api.CreateVolumeRequest) (api.Volume, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if req.SizeMiB < 16 {
		return api.Volume{}, &api.Error{Code: api.CodeInvalidArgument, Message: "size_mib is too small", Details: map[string]any{"field": "size_mib"}}
	}
	f.n++
	v := api.Volume{ID: fmt.Sprintf("vol_%d", f.n), TeamID: teamID, Name: req.Name, SizeMiB: req.SizeMiB, Node: "node-1", Sandboxes: []string{}}
	f.vs = append(f.vs, v)
	return v, nil
}

func (f *fakeVolumes) find(teamID, ref string) (int, error) {
	for i, v := range f.vs {
		if v.TeamID == teamID && (v.ID == ref || v.Name == ref) {
			return i, nil
		}
	}
	return 0, api.Errorf(api.CodeNotFound, "volume %s not found", ref)
}

func (f *fakeVolumes) GetVolume(ctx context.Context, teamID, ref string) (api.Volume, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	i, err := f.find(teamID, ref)
	if err != nil {
		return api.Volume{}, err
	}
	return f.vs[i], nil
}

func (f *fakeVolumes) ListVolumes(ctx context.Context, teamID string, q lifecycle.VolumeQuery) (api.List[api.Volume], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	l := api.List[api.Volume]{Items: []api.Volume{}}
	for _, v := range f.vs {
		if v.TeamID == teamID {
			l.Items = append(l.Items, v)
		}
	}
	return l, nil
}

func (f *fakeVolumes) DeleteVolume(ctx context.Context, teamID, ref string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	i, err := f.find(teamID, ref)
	if err != nil {
		return err
	}
	if users := f.vs[i].Sandboxes; len(users) > 0 {
		return &api.Error{Code: api.CodeConflict, Message: "volume is mounted by " + strings.Join(users, ", "), Details: map[string]any{"sandboxes": users}}
	}
	f.vs = slices.Delete(f.vs, i, i+1)
	return nil
}

// TestVolumeRoutes: POST, GET and DELETE /v1/volumes answer as API.md
// says (201 with Location, 200, 204; errors in its format: 400 for a bad
// body, 404 for another team's volume, 409 naming the sandboxes that
// mount one), and where a volume is shows to the admin team only.
func TestVolumeRoutes(t *testing.T) {
	s := newTestServer(t)
	vols := &fakeVolumes{}
	s.h.Volumes = vols

	resp, body := s.do(t, "POST", "/v1/volumes", nil, strings.NewReader(`{"name":"data","size_mib":64}`))
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("create answered %d %s", resp.StatusCode, body)
	}
	var v api.Volume
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatal(err)
	}
	if v.ID != "vol_1" || v.Name != "data" || v.SizeMiB != 64 || v.TeamID != teamA {
		t.Fatalf("created %+v", v)
	}
	if v.Node != "" {
		t.Errorf("team a sees the volume's node %q", v.Node)
	}
	if loc := resp.Header.Get("Location"); loc != "/v1/volumes/vol_1" {
		t.Errorf("Location %q", loc)
	}

	// Bad bodies: an unknown field, a wrong type, a refused size.
	resp, body = s.do(t, "POST", "/v1/volumes", nil, strings.NewReader(`{"name":"x","size_mib":64,"sizeMiB":1}`))
	wantError(t, resp, body, http.StatusBadRequest, api.CodeInvalidArgument)
	resp, body = s.do(t, "POST", "/v1/volumes", nil, strings.NewReader(`{"name":"x","size_mib":"big"}`))
	wantError(t, resp, body, http.StatusBadRequest, api.CodeInvalidArgument)
	resp, body = s.do(t, "POST", "/v1/volumes", nil, strings.NewReader(`{"name":"x","size_mib":1}`))
	if e := wantError(t, resp, body, http.StatusBadRequest, api.CodeInvalidArgument); e.Details["field"] != "size_mib" {
		t.Errorf("details %v", e.Details)
	}

	for _, ref := range []string{"vol_1", "data"} {
		resp, body = s.do(t, "GET", "/v1/volumes/"+ref, nil, nil)
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"id":"vol_1"`) {
			t.Fatalf("get %s answered %d %s", ref, resp.StatusCode, body)
		}
		if strings.Contains(string(body), "node-1") {
			t.Errorf("team a sees the node: %s", body)
		}
	}
	resp, body = s.do(t, "GET", "/v1/volumes", nil, nil)
	var l api.List[api.Volume]
	if err := json.Unmarshal(body, &l); err != nil || resp.StatusCode != http.StatusOK || len(l.Items) != 1 || l.Items[0].Node != "" {
		t.Fatalf("list answered %d %s (%v)", resp.StatusCode, body, err)
	}

	// Another team: 404 everywhere, and an empty list.
	b := map[string]string{"Authorization": "Bearer " + keyB}
	for _, m := range []string{"GET", "DELETE"} {
		resp, body = s.do(t, m, "/v1/volumes/vol_1", b, nil)
		wantError(t, resp, body, http.StatusNotFound, api.CodeNotFound)
	}
	resp, body = s.do(t, "GET", "/v1/volumes", b, nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"items":[]`) {
		t.Fatalf("team b lists %d %s", resp.StatusCode, body)
	}

	// The admin team sees where its volumes are.
	s.fake.AuthenticateFn = func(ctx context.Context, key string) (lifecycle.Principal, error) {
		return lifecycle.Principal{Team: api.Team{ID: "team_admin", Name: "admin"}, KeyID: "key_admin"}, nil
	}
	resp, body = s.do(t, "POST", "/v1/volumes", nil, strings.NewReader(`{"name":"mine","size_mib":16}`))
	if resp.StatusCode != http.StatusCreated || !strings.Contains(string(body), `"node":"node-1"`) {
		t.Fatalf("admin's create answered %d %s", resp.StatusCode, body)
	}
	s.fake.AuthenticateFn = nil

	// Mounted: 409 naming the sandboxes; then deleted: 204, and gone.
	vols.vs[0].Sandboxes = []string{"sbx_1", "sbx_2"}
	resp, body = s.do(t, "DELETE", "/v1/volumes/data", nil, nil)
	e := wantError(t, resp, body, http.StatusConflict, api.CodeConflict)
	if !strings.Contains(e.Message, "sbx_1, sbx_2") || fmt.Sprint(e.Details["sandboxes"]) != "[sbx_1 sbx_2]" {
		t.Errorf("409 %+v does not name the sandboxes", e)
	}
	vols.vs[0].Sandboxes = []string{}
	resp, body = s.do(t, "DELETE", "/v1/volumes/data", nil, nil)
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("delete answered %d %s", resp.StatusCode, body)
	}
	resp, body = s.do(t, "GET", "/v1/volumes/vol_1", nil, nil)
	wantError(t, resp, body, http.StatusNotFound, api.CodeNotFound)
}
