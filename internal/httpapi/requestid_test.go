package httpapi

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestRequestID: every answer carries X-Request-Id: the client's own when
// it is plain, else a fresh req_ ID (also for one too long or with
// control characters or spaces); errors and successes alike.
func TestRequestID(t *testing.T) {
	h := newHandler(newFake(), slog.New(slog.DiscardHandler))
	srv := httptest.NewServer(h)
	defer srv.Close()
	for _, tc := range []struct {
		name, sent string
		echoed     bool
	}{
		{"none", "", false},
		{"plain", "client-7f3a", true},
		{"too long", strings.Repeat("a", 129), false},
		{"a space", "a b", false},
		{"a tab", "a\tb", false},
	} {
		for _, path := range []string{"/healthz", "/v1/sandboxes"} { // a success, an error (no key)
			req, _ := http.NewRequest("GET", srv.URL+path, nil)
			if tc.sent != "" {
				req.Header.Set("X-Request-Id", tc.sent)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			got := resp.Header.Get("X-Request-Id")
			switch {
			case tc.echoed && got != tc.sent:
				t.Errorf("%s %s: X-Request-Id %q; want the client's %q", tc.name, path, got, tc.sent)
			case !tc.echoed && (!strings.HasPrefix(got, "req_") || got == tc.sent):
				t.Errorf("%s %s: X-Request-Id %q; want a fresh req_ ID", tc.name, path, got)
			}
		}
	}
}
