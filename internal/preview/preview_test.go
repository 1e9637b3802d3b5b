package preview

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/cove-dev/cove/api"
)

// fakeBackend lets requests with the token "good" in (or any for
// "public" sandboxes) and dials the test's app server.
type fakeBackend struct {
	app   string // address of the app
	opens []string
}

func (b *fakeBackend) OpenPreview(ctx context.Context, sbx string, port int, token string) (api.Preview, error) {
	b.opens = append(b.opens, sbx)
	if sbx != "sbx_public" && token != "good" {
		return api.Preview{}, api.Errorf(api.CodeUnauthenticated, "token needed")
	}
	return api.Preview{SandboxID: sbx, Port: port}, nil
}

func (b *fakeBackend) DialPreview(ctx context.Context, sbx string, port int) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "tcp", b.app)
}

func (b *fakeBackend) RedeemPreviewLink(ctx context.Context, sbx string, port int, code string) (string, error) {
	if code != "once" {
		return "", api.Errorf(api.CodeUnauthenticated, "used")
	}
	return "good", nil
}

func writeErr(w http.ResponseWriter, r *http.Request, err error) {
	var e *api.Error
	if !errors.As(err, &e) {
		e = api.Errorf(api.CodeInternal, "internal error")
	}
	status := map[api.Code]int{api.CodeUnauthenticated: 401, api.CodeNotFound: 404, api.CodeUnavailable: 503}[e.Code]
	if status == 0 {
		status = 500
	}
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(api.ErrorResponse{Error: e})
}

func TestMatch(t *testing.T) {
	r := New(&fakeBackend{}, "Preview.Test:8080", writeErr)
	for _, tt := range []struct {
		host string
		sbx  string
		port int
		ok   bool
	}{
		{"8000-sbx_abc.preview.test", "sbx_abc", 8000, true},
		{"8000-sbx_abc.preview.test:8080", "sbx_abc", 8000, true},
		{"8000-SBX_ABC.PREVIEW.TEST.", "sbx_abc", 8000, true},
		{"preview.test", "", 0, false},
		{"8000-sbx_abc.other.test", "", 0, false},
		{"a.8000-sbx_abc.preview.test", "", 0, false},
		{"08000-sbx_abc.preview.test", "", 0, false},
		{"70000-sbx_abc.preview.test", "", 0, false},
		{"0-sbx_abc.preview.test", "", 0, false},
		{"8000-.preview.test", "", 0, false},
		{"8000.preview.test", "", 0, false},
		{"8000-sbx_abc.evilpreview.test", "", 0, false},
	} {
		sbx, port, ok := r.Match(tt.host)
		if sbx != tt.sbx || port != tt.port || ok != tt.ok {
			t.Errorf("Match(%q) = %q, %d, %t; want %q, %d, %t", tt.host, sbx, port, ok, tt.sbx, tt.port, tt.ok)
		}
	}
	if _, _, ok := New(&fakeBackend{}, "", writeErr).Match("8000-sbx_abc.preview.test"); ok {
		t.Error("a router without a domain matched a host")
	}
}

func TestStripCookie(t *testing.T) {
	h := http.Header{}
	h.Add("Cookie", "a=1; cove_preview=secret; b=2")
	h.Add("Cookie", "cove_preview=x")
	stripCookie(h, CookieName)
	if got := h.Values("Cookie"); len(got) != 1 || got[0] != "a=1; b=2" {
		t.Errorf("cookies %q", got)
	}
}

// TestProxy: the router forwards what the app needs and nothing of cove's
// own, keeps the app's cookies on its host or path, and marks the path
// form's answers with CSP sandbox.
func TestProxy(t *testing.T) {
	var seen http.Header
	var seenPath string
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen, seenPath = r.Header.Clone(), r.URL.Path
		http.SetCookie(w, &http.Cookie{Name: "app", Value: "1", Domain: "preview.test", Path: "/x"})
		io.WriteString(w, "app answer")
	}))
	defer app.Close()
	b := &fakeBackend{app: app.Listener.Addr().String()}
	r := New(b, "preview.test", writeErr)
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/sandboxes/{id}/ports/{port}/{rest...}", r.ServePath)
	mux.HandleFunc("/v1/sandboxes/{id}/ports/{port}", r.ServePath)
	serve := func(req *http.Request) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		if _, _, ok := r.Match(req.Host); ok {
			r.ServeHTTP(w, req)
		} else {
			mux.ServeHTTP(w, req)
		}
		return w
	}

	req := httptest.NewRequest("GET", "http://8000-sbx_a.preview.test/page?q=1", nil)
	req.Header.Set(api.PreviewTokenHeader, "good")
	req.Header.Set("Authorization", "Bearer cove_secretkey")
	req.Header.Set("Cookie", "cove_preview=good; theirs=1")
	w := serve(req)
	if w.Code != 200 || w.Body.String() != "app answer" {
		t.Fatalf("%d %q", w.Code, w.Body)
	}
	if seen.Get(api.PreviewTokenHeader) != "" || seen.Get("Authorization") != "" || seen.Get("Cookie") != "theirs=1" || seenPath != "/page" {
		t.Errorf("the app saw %v at %s", seen, seenPath)
	}
	if ck := w.Result().Cookies(); len(ck) != 1 || ck[0].Domain != "" || ck[0].Path != "/x" {
		t.Errorf("cookies %+v", ck)
	}
	if w.Header().Get("Content-Security-Policy") != "" {
		t.Errorf("the Host form got a CSP")
	}

	req = httptest.NewRequest("GET", "http://api.test/v1/sandboxes/sbx_a/ports/8000/deep/page", nil)
	req.Header.Set(api.PreviewTokenHeader, "good")
	req.Header.Set("Authorization", "Bearer app-own-token")
	w = serve(req)
	if w.Code != 200 || w.Header().Get("Content-Security-Policy") != "sandbox" || seenPath != "/deep/page" ||
		seen.Get("X-Forwarded-Prefix") != "/v1/sandboxes/sbx_a/ports/8000" || seen.Get("Authorization") != "Bearer app-own-token" {
		t.Errorf("path form: %d CSP %q path %q headers %v", w.Code, w.Header().Get("Content-Security-Policy"), seenPath, seen)
	}
	if ck := w.Result().Cookies(); len(ck) != 1 || ck[0].Path != "/v1/sandboxes/sbx_a/ports/8000/x" {
		t.Errorf("path form cookies %+v", ck)
	}

	w = serve(httptest.NewRequest("GET", "http://api.test/v1/sandboxes/sbx_a/ports/8000/", nil))
	if w.Code != 401 || w.Header().Get("Content-Security-Policy") != "sandbox" {
		t.Errorf("without token: %d, CSP %q", w.Code, w.Header().Get("Content-Security-Policy"))
	}
	w = serve(httptest.NewRequest("GET", "http://api.test/v1/sandboxes/sbx_a/ports/8000", nil))
	if w.Code != http.StatusPermanentRedirect || w.Header().Get("Location") != "/v1/sandboxes/sbx_a/ports/8000/" {
		t.Errorf("no slash: %d %q", w.Code, w.Header().Get("Location"))
	}
	w = serve(httptest.NewRequest("GET", "http://8000-sbx_public.preview.test/", nil))
	if w.Code != 200 {
		t.Errorf("public: %d", w.Code)
	}

	// A one-time link sets the cookie on the preview's host and sends the
	// browser on without the code.
	w = serve(httptest.NewRequest("GET", "http://8000-sbx_a.preview.test/p?x=1&"+LinkParam+"=once", nil))
	ck := w.Result().Cookies()
	if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/p?x=1" || len(ck) != 1 ||
		ck[0].Name != CookieName || ck[0].Value != "good" || ck[0].Domain != "" || !ck[0].HttpOnly || ck[0].Path != "/" {
		t.Errorf("link: %d %q %+v", w.Code, w.Header().Get("Location"), ck)
	}
	if w = serve(httptest.NewRequest("GET", "http://8000-sbx_a.preview.test/?"+LinkParam+"=used", nil)); w.Code != 401 {
		t.Errorf("a used link: %d", w.Code)
	}
	w = serve(httptest.NewRequest("GET", "http://api.test/v1/sandboxes/sbx_a/ports/8000/?"+LinkParam+"=once", nil))
	if ck := w.Result().Cookies(); len(ck) != 1 || ck[0].Path != "/v1/sandboxes/sbx_a/ports/8000/" {
		t.Errorf("path-form link cookie %+v", ck)
	}
	if !strings.Contains(strings.Join(b.opens, ","), "sbx_a") {
		t.Errorf("the backend was not asked: %v", b.opens)
	}
}

func TestAppDown(t *testing.T) {
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	r := New(&fakeBackend{app: addr}, "preview.test", writeErr)
	w := httptest.NewRecorder()
	r.ServeHTTP(w, httptest.NewRequest("GET", "http://8000-sbx_public.preview.test/", nil))
	if w.Code != 503 {
		t.Errorf("%d %s", w.Code, w.Body)
	}
}
