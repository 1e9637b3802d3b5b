package console

import (
	"bytes"
	"compress/gzip"
	"io"
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
	for _, p := range []string{"/", "/sandboxes/sb-1", "/sandboxes/my-name", "/sandboxes/sb-1/metrics", "/usage", "/team"} {
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

// TestGzip: the script and styles go gzip-compressed to a client that
// accepts it (and unchanged to one that does not), and say so in Vary.
func TestGzip(t *testing.T) {
	h := New(http.NotFoundHandler())
	if !h.Built() {
		t.Skip("the console is not built into dist (make build builds it)")
	}
	n := 0
	for p, a := range h.assets {
		if !strings.HasSuffix(p, ".js") && !strings.HasSuffix(p, ".css") {
			continue
		}
		n++
		for _, tc := range []struct {
			accept string
			gz     bool
		}{{"gzip, deflate, br", true}, {"br;q=1.0, gzip;q=0.8", true}, {"", false}, {"gzip;q=0", false}, {"identity", false}} {
			r := httptest.NewRequest("GET", p, nil)
			if tc.accept != "" {
				r.Header.Set("Accept-Encoding", tc.accept)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			body := w.Body.Bytes()
			if got := w.Header().Get("Content-Encoding") == "gzip"; got != tc.gz {
				t.Fatalf("%s with %q: Content-Encoding %q", p, tc.accept, w.Header().Get("Content-Encoding"))
			}
			if w.Header().Get("Vary") != "Accept-Encoding" {
				t.Errorf("%s: Vary %q", p, w.Header().Get("Vary"))
			}
			if tc.gz {
				zr, err := gzip.NewReader(bytes.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				if body, err = io.ReadAll(zr); err != nil {
					t.Fatal(err)
				}
				if len(w.Body.Bytes()) >= len(a.body) {
					t.Errorf("%s: compressed %d bytes, plain %d", p, w.Body.Len(), len(a.body))
				}
			}
			if !bytes.Equal(body, a.body) {
				t.Fatalf("%s with %q: the body differs from the asset", p, tc.accept)
			}
		}
	}
	if n < 2 {
		t.Fatalf("%d scripts and styles in dist", n)
	}
}
