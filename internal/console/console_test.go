package console

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestRoutes: pages and deep links get the index with a CSP, the API
// keeps its paths.
func TestRoutes(t *testing.T) {
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("api")) })
	h := New(api)
	for _, p := range []string{"/", "/sandboxes/sb-1", "/sandboxes/my-name"} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", p, nil))
		if w.Header().Get("Content-Security-Policy") != CSP || !strings.Contains(w.Body.String(), "<") {
			t.Errorf("%s: %d %q %v", p, w.Code, w.Body.String(), w.Header())
		}
		if strings.Contains(w.Body.String(), "<script>") {
			t.Errorf("%s: an inline script", p)
		}
	}
	for _, p := range []string{"/v1/sandboxes", "/healthz", "/v1/"} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", p, nil))
		if w.Body.String() != "api" {
			t.Errorf("%s went to the console", p)
		}
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("POST", "/", nil))
	if w.Body.String() != "api" {
		t.Errorf("POST / went to the console")
	}
}

// TestPass: a request Pass picks goes to the API even at /.
func TestPass(t *testing.T) {
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("api")) })
	h := New(api)
	h.Pass = func(r *http.Request) bool { return r.Host == "app.preview.test" }
	r := httptest.NewRequest("GET", "/", nil)
	r.Host = "app.preview.test"
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Body.String() != "api" {
		t.Fatalf("a preview's / went to the console: %q", w.Body.String())
	}
}
