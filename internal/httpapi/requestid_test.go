package httpapi

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"

	"github.com/cove-dev/cove/internal/store"
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

// TestStoreAwayIsUnavailable: a store whose connection is refused or
// whose database shuts down answers 503 unavailable with Retry-After,
// not 500: the request may be retried.
func TestStoreAwayIsUnavailable(t *testing.T) {
	h := &shared{log: slog.New(slog.DiscardHandler)}
	for _, err := range []error{
		fmt.Errorf("get sandbox: %w", &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}),
		errors.New("plain failure"),
	} {
		w := httptest.NewRecorder()
		h.writeError(w, httptest.NewRequest("GET", "/v1/sandboxes", nil), err)
		want, retry := http.StatusServiceUnavailable, "1"
		if !store.Unavailable(err) {
			want, retry = http.StatusInternalServerError, ""
		}
		if w.Code != want || w.Header().Get("Retry-After") != retry {
			t.Errorf("%v: %d Retry-After %q; want %d %q (%s)", err, w.Code, w.Header().Get("Retry-After"), want, retry, w.Body)
		}
	}
}
