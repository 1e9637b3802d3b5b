package httpapi

import (
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/page"
)

// fakeSecrets keeps secrets in memory per team, values included, so tests
// can see what reached the control plane.
type fakeSecrets struct {
	secretsMu sync.Mutex
	values    map[string]string // team/name → value
}

func (f *fakeSecrets) Put(_ context.Context, teamID, name, value string) (api.Secret, bool, error) {
	f.secretsMu.Lock()
	defer f.secretsMu.Unlock()
	if f.values == nil {
		f.values = map[string]string{}
	}
	_, had := f.values[teamID+"/"+name]
	f.values[teamID+"/"+name] = value
	return api.Secret{Name: name, CreatedAt: time.Unix(1, 0).UTC(), UpdatedAt: time.Unix(2, 0).UTC()}, !had, nil
}

func (f *fakeSecrets) Get(_ context.Context, teamID, name string) (api.Secret, error) {
	f.secretsMu.Lock()
	defer f.secretsMu.Unlock()
	if _, ok := f.values[teamID+"/"+name]; !ok {
		return api.Secret{}, api.Errorf(api.CodeNotFound, "secret %q not found", name)
	}
	return api.Secret{Name: name}, nil
}

func (f *fakeSecrets) List(_ context.Context, teamID string, _ page.Page) (api.List[api.Secret], error) {
	f.secretsMu.Lock()
	defer f.secretsMu.Unlock()
	l := api.List[api.Secret]{Items: []api.Secret{}}
	for _, k := range slices.Sorted(maps.Keys(f.values)) {
		if team, name, _ := strings.Cut(k, "/"); team == teamID {
			l.Items = append(l.Items, api.Secret{Name: name})
		}
	}
	return l, nil
}

func (f *fakeSecrets) Delete(_ context.Context, teamID, name string) error {
	f.secretsMu.Lock()
	defer f.secretsMu.Unlock()
	if _, ok := f.values[teamID+"/"+name]; !ok {
		return api.Errorf(api.CodeNotFound, "secret %q not found", name)
	}
	delete(f.values, teamID+"/"+name)
	return nil
}

func TestSecretsRoutes(t *testing.T) {
	s := newTestServer(t)
	const value = "s3cret-value-never-shown"
	body := func() *strings.Reader { return strings.NewReader(`{"value":"` + value + `"}`) }

	resp, b := s.do(t, http.MethodPut, "/v1/secrets/github-token", nil, body())
	if resp.StatusCode != http.StatusCreated || resp.Header.Get("Location") != "/v1/secrets/github-token" {
		t.Fatalf("first PUT: %d %s, Location %q; want 201", resp.StatusCode, b, resp.Header.Get("Location"))
	}
	resp, b = s.do(t, http.MethodPut, "/v1/secrets/github-token", nil, body())
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("second PUT: %d %s; want 200", resp.StatusCode, b)
	}
	if got := s.fake.secrets.values[teamA+"/github-token"]; got != value {
		t.Fatalf("the control plane got %q", got)
	}
	resp, b = s.do(t, http.MethodGet, "/v1/secrets", nil, nil)
	var l api.List[api.Secret]
	if resp.StatusCode != http.StatusOK || json.Unmarshal(b, &l) != nil || len(l.Items) != 1 || l.Items[0].Name != "github-token" {
		t.Fatalf("list: %d %s", resp.StatusCode, b)
	}
	resp, b = s.do(t, http.MethodGet, "/v1/secrets/github-token", nil, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("get: %d %s", resp.StatusCode, b)
	}
	for _, bad := range []struct{ body, want string }{
		{`{"value":"x","extra":1}`, "unknown field"},
		{`{"value":1}`, "must be a string"},
		{``, "empty"},
	} {
		resp, b := s.do(t, http.MethodPut, "/v1/secrets/other", nil, strings.NewReader(bad.body))
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), bad.want) {
			t.Errorf("PUT %q: %d %s; want 400 saying %q", bad.body, resp.StatusCode, b, bad.want)
		}
	}

	// Team B's key sees none of it.
	other := func(method, path string) (*http.Response, []byte) {
		req, _ := http.NewRequestWithContext(t.Context(), method, s.url+path, nil)
		req.Header.Set("Authorization", "Bearer "+keyB)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var e api.ErrorResponse
		json.NewDecoder(resp.Body).Decode(&e)
		b, _ := json.Marshal(e)
		return resp, b
	}
	if resp, b := other(http.MethodGet, "/v1/secrets/github-token"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("team B get: %d %s; want 404", resp.StatusCode, b)
	}
	if resp, b := other(http.MethodDelete, "/v1/secrets/github-token"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("team B delete: %d %s; want 404", resp.StatusCode, b)
	}

	resp, b = s.do(t, http.MethodDelete, "/v1/secrets/github-token", nil, nil)
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("delete: %d %s", resp.StatusCode, b)
	}
	if resp, _ = s.do(t, http.MethodDelete, "/v1/secrets/github-token", nil, nil); resp.StatusCode != http.StatusNotFound {
		t.Errorf("second delete: %d; want 404", resp.StatusCode)
	}
	if strings.Contains(s.logs.String(), value) {
		t.Errorf("the value is in the API's log:\n%s", s.logs.String())
	}
}
