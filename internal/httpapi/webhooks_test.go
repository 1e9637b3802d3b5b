package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/lifecycle"
)

// TestMetricsForAdminsOnly: GET /metrics needs a key (401), of the admin
// team (403 for others), and is 404 when the service serves no metrics.
func TestMetricsForAdminsOnly(t *testing.T) {
	s := newTestServer(t)
	resp, body := s.do(t, "GET", "/metrics", nil, nil)
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("without metrics: %d %s", resp.StatusCode, body)
	}
	s.h.ServeMetrics(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Write([]byte("cove_up 1\n"))
	}))
	s.fake.AuthenticateFn = func(ctx context.Context, key string) (lifecycle.Principal, error) {
		switch key {
		case keyA:
			return lifecycle.Principal{Team: api.Team{ID: teamA, Name: "a"}}, nil
		case "cove_admin":
			return lifecycle.Principal{Team: api.Team{ID: "team_admin", Name: lifecycle.AdminTeam}}, nil
		}
		return lifecycle.Principal{}, api.Errorf(api.CodeUnauthenticated, "the API key is not valid")
	}
	for _, c := range []struct {
		key    string
		status int
		code   api.Code
	}{
		{"", http.StatusUnauthorized, api.CodeUnauthenticated},
		{keyA, http.StatusForbidden, api.CodePermissionDenied},
		{"cove_admin", http.StatusOK, ""},
	} {
		h := map[string]string{"Authorization": ""}
		if c.key != "" {
			h["Authorization"] = "Bearer " + c.key
		}
		resp, body := s.do(t, "GET", "/metrics", h, nil)
		if resp.StatusCode != c.status {
			t.Errorf("key %q: %d %s", c.key, resp.StatusCode, body)
			continue
		}
		if c.code != "" {
			var er api.ErrorResponse
			if err := json.Unmarshal(body, &er); err != nil || er.Error == nil || er.Error.Code != c.code {
				t.Errorf("key %q: %s", c.key, body)
			}
		} else if string(body) != "cove_up 1\n" {
			t.Errorf("admin: %q", body)
		}
	}
}

// TestWebhooksNotServed: a control plane without webhooks answers 404 in
// the API's error format.
func TestWebhooksNotServed(t *testing.T) {
	s := newTestServer(t)
	resp, body := s.do(t, "GET", "/v1/webhooks", nil, nil)
	var er api.ErrorResponse
	if resp.StatusCode != http.StatusNotFound || json.Unmarshal(body, &er) != nil || er.Error == nil || er.Error.Code != api.CodeNotFound {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
}
