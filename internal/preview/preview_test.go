package preview

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
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

func (b *fakeBackend) OpenPreview(ctx context.Context, sbx string, port int, tokens []string) (api.Preview, error) {
	b.opens = append(b.opens, sbx)
	if sbx != "sbx_public" && !slices.Contains(tokens, "good") {
		return api.Preview{}, api.Errorf(api.CodeUnauthenticated, "token needed")
	}
	if sbx == "sbx_public" {
		return api.Preview{SandboxID: sbx, Port: port, Visibility: api.VisibilityPublic}, nil
	}
	return api.Preview{SandboxID: sbx, Port: port, Visibility: api.VisibilityPrivate}, nil
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
	status := map[api.Code]int{api.CodeUnauthenticated: 401, api.CodePermissionDenied: 403, api.CodeNotFound: 404, api.CodeUnavailable: 503}[e.Code]
	if status == 0 {
		status = 500
	}
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(api.ErrorResponse{Error: e})
}

func TestMatch(t *testing.T) {
	r := New(&fakeBackend{}, "Preview.Test:8080", "http", writeErr)
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
	if _, _, ok := New(&fakeBackend{}, "", "http", writeErr).Match("8000-sbx_abc.preview.test"); ok {
		t.Error("a router without a domain matched a host")
	}
}

func TestStripCookie(t *testing.T) {
	h := http.Header{}
	h.Add("Cookie", "a=1; cove_preview=secret; b=2")
	h.Add("Cookie", "cove_preview=x; __Host-cove_preview=y")
	stripCookie(h, CookieName, SecureCookieName)
	if got := h.Values("Cookie"); len(got) != 1 || got[0] != "a=1; b=2" {
		t.Errorf("cookies %q", got)
	}
}

// TestProxy: the router forwards what the app needs and nothing of cove's
// own, keeps the app's cookies on its host and its Service Workers under
// their own path, and answers the former path form with a 404 naming the
// preview's host.
func TestProxy(t *testing.T) {
	var seen http.Header
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = r.Header.Clone()
		http.SetCookie(w, &http.Cookie{Name: "app", Value: "1", Domain: "preview.test", Path: "/x"})
		http.SetCookie(w, &http.Cookie{Name: CookieName, Value: "planted", Path: "/"})
		w.Header().Set("Service-Worker-Allowed", "/")
		io.WriteString(w, "app answer")
	}))
	defer app.Close()
	b := &fakeBackend{app: app.Listener.Addr().String()}
	r := New(b, "preview.test:7070", "http", writeErr)
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
	req.Header.Set("X-API-Key", "e2b_secretkey")
	req.Header.Set("X-Access-Token", "envd-token")
	req.Header.Set("Cookie", "cove_preview=8000-sbx_a.good; __Host-cove_preview=x; theirs=1")
	w := serve(req)
	if w.Code != 200 || w.Body.String() != "app answer" {
		t.Fatalf("%d %q", w.Code, w.Body)
	}
	if seen.Get(api.PreviewTokenHeader) != "" || seen.Get("Authorization") != "" || seen.Get("Cookie") != "theirs=1" ||
		seen.Get("X-API-Key") != "" || seen.Get("X-Access-Token") != "" {
		t.Errorf("the app saw %v", seen)
	}
	if ck := w.Result().Cookies(); len(ck) != 1 || ck[0].Name != "app" || ck[0].Domain != "" || ck[0].Path != "/x" {
		t.Errorf("cookies %+v", ck)
	}
	if got := w.Header().Get("Service-Worker-Allowed"); got != "" {
		t.Errorf("Service-Worker-Allowed %q reached the browser", got)
	}

	for _, path := range []string{"/v1/sandboxes/sbx_a/ports/8000/deep/page", "/v1/sandboxes/sbx_a/ports/8000"} {
		req = httptest.NewRequest("GET", "http://api.test"+path, nil)
		req.Header.Set(api.PreviewTokenHeader, "good")
		seen = nil
		w = serve(req)
		if w.Code != 404 || w.Header().Get("Content-Security-Policy") != "sandbox" || seen != nil ||
			!strings.Contains(w.Body.String(), "http://8000-sbx_a.preview.test:7070/") {
			t.Errorf("path form %s: %d CSP %q %s (the app saw %v)", path, w.Code, w.Header().Get("Content-Security-Policy"), w.Body, seen)
		}
	}
	w = serve(httptest.NewRequest("GET", "http://8000-sbx_public.preview.test/", nil))
	if w.Code != 200 {
		t.Errorf("public: %d", w.Code)
	}

	// A one-time link sets a host-only cookie bound to the preview and
	// sends the browser on without the code.
	w = serve(httptest.NewRequest("GET", "http://8000-sbx_a.preview.test/p?x=1&"+LinkParam+"=once", nil))
	ck := w.Result().Cookies()
	if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/p?x=1" || len(ck) != 1 ||
		ck[0].Name != CookieName || ck[0].Value != "8000-sbx_a.good" || ck[0].Domain != "" || !ck[0].HttpOnly || ck[0].Path != "/" || ck[0].Secure {
		t.Errorf("link: %d %q %+v", w.Code, w.Header().Get("Location"), ck)
	}
	if w = serve(httptest.NewRequest("GET", "http://8000-sbx_a.preview.test/?"+LinkParam+"=used", nil)); w.Code != 401 {
		t.Errorf("a used link: %d", w.Code)
	}
	if !strings.Contains(strings.Join(b.opens, ","), "sbx_a") {
		t.Errorf("the backend was not asked: %v", b.opens)
	}
}

// TestCookies: a private preview's cookie authenticates only its own
// preview, from any position among cookies of the name, and only for
// requests of its own origin or without one; over https (or behind a
// TLS-ending proxy) it is __Host- and Secure, and the http name no
// longer counts.
func TestCookies(t *testing.T) {
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer app.Close()
	b := &fakeBackend{app: app.Listener.Addr().String()}
	for _, tt := range []struct {
		name, scheme, host, cookie, origin string
		upgrade                            bool
		want                               int
	}{
		{"own cookie", "http", "8000-sbx_a.preview.test", "cove_preview=8000-sbx_a.good", "", false, 200},
		{"own cookie, same origin", "http", "8000-sbx_a.preview.test:7070", "cove_preview=8000-sbx_a.good", "http://8000-SBX_A.preview.test:7070", false, 200},
		{"own cookie, sibling's origin", "http", "8000-sbx_a.preview.test", "cove_preview=8000-sbx_a.good", "http://8000-sbx_b.preview.test", false, 403},
		{"own cookie, another port", "http", "8000-sbx_a.preview.test:7070", "cove_preview=8000-sbx_a.good", "http://8000-sbx_a.preview.test:7071", false, 403},
		{"own cookie, Origin null", "http", "8000-sbx_a.preview.test", "cove_preview=8000-sbx_a.good", "null", false, 403},
		{"own cookie, WebSocket from a sibling", "http", "8000-sbx_a.preview.test", "cove_preview=8000-sbx_a.good", "http://9000-sbx_b.preview.test", true, 403},
		{"public preview from a sibling", "http", "8000-sbx_public.preview.test", "cove_preview=8000-sbx_public.good", "http://8000-sbx_b.preview.test", false, 200},
		{"sibling's cookie first", "http", "8000-sbx_a.preview.test", "cove_preview=8000-sbx_b.good; cove_preview=8000-sbx_a.good", "", false, 200},
		{"junk first", "http", "8000-sbx_a.preview.test", "cove_preview=8000-sbx_a.junk; cove_preview=8000-sbx_a.good", "", false, 200},
		{"own last of two lines", "http", "8000-sbx_a.preview.test", "cove_preview=junk\x00cove_preview=8000-sbx_a.good", "", false, 200},
		{"a cookie for another preview", "http", "8000-sbx_a.preview.test", "cove_preview=8000-sbx_b.good", "", false, 401},
		{"a bare token", "http", "8000-sbx_a.preview.test", "cove_preview=good", "", false, 401},
		{"https: __Host- cookie", "https", "8000-sbx_a.preview.test", "__Host-cove_preview=8000-sbx_a.good", "", false, 200},
		{"https: the http name", "https", "8000-sbx_a.preview.test", "cove_preview=8000-sbx_a.good", "", false, 401},
		{"https: __Host- cookie, sibling's origin", "https", "8000-sbx_a.preview.test", "__Host-cove_preview=8000-sbx_a.good", "https://8000-sbx_b.preview.test", false, 403},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := New(b, "preview.test", tt.scheme, writeErr)
			req := httptest.NewRequest("POST", "http://"+tt.host+"/", nil)
			for _, line := range strings.Split(tt.cookie, "\x00") {
				req.Header.Add("Cookie", line)
			}
			if tt.origin != "" {
				req.Header.Set("Origin", tt.origin)
			}
			if tt.upgrade {
				req.Header.Set("Connection", "Upgrade")
				req.Header.Set("Upgrade", "websocket")
			}
			w := httptest.NewRecorder()
			r.ServeHTTP(w, req)
			if w.Code != tt.want {
				t.Errorf("%d, want %d: %s", w.Code, tt.want, w.Body)
			}
		})
	}
	// The link's cookie over https, also when a proxy in front ended TLS.
	r := New(b, "preview.test", "https", writeErr)
	w := httptest.NewRecorder()
	r.ServeHTTP(w, httptest.NewRequest("GET", "http://8000-sbx_a.preview.test/?"+LinkParam+"=once", nil))
	if ck := w.Result().Cookies(); len(ck) != 1 || ck[0].Name != SecureCookieName || !ck[0].Secure || ck[0].Path != "/" || ck[0].Domain != "" || ck[0].Value != "8000-sbx_a.good" {
		t.Errorf("https link cookie %+v", ck)
	}
}

// TestInterimAnswers: an app that answers 103 and 100 before its page
// gets its final answer held to the same rules (Service-Worker-Allowed
// gone, cookies kept on the host), and an interim answer carries Link
// headers alone.
func TestInterimAnswers(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				http.ReadRequest(bufio.NewReader(c))
				io.WriteString(c, "HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload; as=style\r\nService-Worker-Allowed: /\r\nSet-Cookie: early=1; Domain=preview.test\r\n\r\n"+
					"HTTP/1.1 100 Continue\r\nX-Interim: 1\r\n\r\n"+
					"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nService-Worker-Allowed: /\r\nSet-Cookie: late=1; Domain=preview.test\r\nContent-Length: 4\r\nConnection: close\r\n\r\npage")
			}()
		}
	}()
	r := New(&fakeBackend{app: ln.Addr().String()}, "preview.test", "http", writeErr)
	srv := httptest.NewServer(r)
	defer srv.Close()
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: 8000-sbx_public.preview.test\r\nConnection: close\r\n\r\n")
	raw, _ := io.ReadAll(c)
	heads := strings.Split(string(raw), "\r\n\r\n")
	if len(heads) < 3 || !strings.HasPrefix(heads[0], "HTTP/1.1 103") || !strings.HasPrefix(heads[1], "HTTP/1.1 100") || !strings.HasPrefix(heads[2], "HTTP/1.1 200") {
		t.Fatalf("answer:\n%s", raw)
	}
	if !strings.Contains(heads[0], "Link: </style.css>") || strings.Contains(heads[0], "Service-Worker-Allowed") || strings.Contains(heads[0], "Set-Cookie") || strings.Contains(heads[1], "X-Interim") {
		t.Errorf("interim answers:\n%s\n\n%s", heads[0], heads[1])
	}
	final := strings.ToLower(heads[2])
	if strings.Contains(final, "service-worker-allowed") || strings.Contains(final, "domain=") || !strings.Contains(final, "set-cookie: late=1") {
		t.Errorf("final answer:\n%s", heads[2])
	}
}

func TestAppDown(t *testing.T) {
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	r := New(&fakeBackend{app: addr}, "preview.test", "http", writeErr)
	w := httptest.NewRecorder()
	r.ServeHTTP(w, httptest.NewRequest("GET", "http://8000-sbx_public.preview.test/", nil))
	if w.Code != 503 {
		t.Errorf("%d %s", w.Code, w.Body)
	}
}

// TestFetchMetadata: a request that carries a private preview's cookie
// may come from the preview's own pages or the visitor (same-origin,
// none), and from elsewhere only as a top-level navigation; subresources,
// no-cors fetches, frames and WebSockets of another origin's page are
// refused whatever they lack of Origin. Without Fetch Metadata the Origin
// rule alone decides. A token header and a public preview are not
// concerned. A cookie's answer may be framed by its own origin alone.
func TestFetchMetadata(t *testing.T) {
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", "default-src 'self'")
		io.WriteString(w, "ok")
	}))
	defer app.Close()
	r := New(&fakeBackend{app: app.Listener.Addr().String()}, "preview.test", "http", writeErr)
	const own, sibling = "http://8000-sbx_a.preview.test", "http://8000-sbx_b.preview.test"
	for _, tt := range []struct {
		name, host, auth string // auth: "cookie", "token" or ""
		site, mode, dest string
		method, origin   string
		want             int
	}{
		{"own page's image", "8000-sbx_a", "cookie", "same-origin", "no-cors", "image", "GET", "", 200},
		{"own page's fetch", "8000-sbx_a", "cookie", "same-origin", "cors", "empty", "POST", own, 200},
		{"own page's frame", "8000-sbx_a", "cookie", "same-origin", "navigate", "iframe", "GET", "", 200},
		{"typed or bookmarked", "8000-sbx_a", "cookie", "none", "navigate", "document", "GET", "", 200},
		{"a link followed from a sibling", "8000-sbx_a", "cookie", "same-site", "navigate", "document", "GET", "", 200},
		{"a link followed from another site", "8000-sbx_a", "cookie", "cross-site", "navigate", "document", "GET", "", 200},
		{"a sibling's form posted", "8000-sbx_a", "cookie", "same-site", "navigate", "document", "POST", sibling, 403},
		{"a sibling's image", "8000-sbx_a", "cookie", "same-site", "no-cors", "image", "GET", "", 403},
		{"a sibling's script", "8000-sbx_a", "cookie", "same-site", "no-cors", "script", "GET", "", 403},
		{"a sibling's style", "8000-sbx_a", "cookie", "same-site", "no-cors", "style", "GET", "", 403},
		{"a sibling's no-cors fetch", "8000-sbx_a", "cookie", "same-site", "no-cors", "empty", "GET", "", 403},
		{"a sibling's frame", "8000-sbx_a", "cookie", "same-site", "navigate", "iframe", "GET", "", 403},
		{"a sibling's object", "8000-sbx_a", "cookie", "same-site", "navigate", "object", "GET", "", 403},
		{"a sibling's WebSocket", "8000-sbx_a", "cookie", "same-site", "websocket", "websocket", "GET", "", 403},
		{"another site's frame", "8000-sbx_a", "cookie", "cross-site", "navigate", "iframe", "GET", "", 403},
		{"another site's image", "8000-sbx_a", "cookie", "cross-site", "no-cors", "image", "GET", "", 403},
		{"an unknown site value", "8000-sbx_a", "cookie", "elsewhere", "no-cors", "image", "GET", "", 403},
		{"same-origin but a foreign Origin", "8000-sbx_a", "cookie", "same-origin", "cors", "empty", "POST", sibling, 403},
		{"no Fetch Metadata", "8000-sbx_a", "cookie", "", "", "", "GET", "", 200},
		{"no Fetch Metadata, a sibling's Origin", "8000-sbx_a", "cookie", "", "", "", "POST", sibling, 403},
		{"token header, a sibling's image", "8000-sbx_a", "token", "same-site", "no-cors", "image", "GET", "", 200},
		{"public, a sibling's frame", "8000-sbx_public", "cookie", "same-site", "navigate", "iframe", "GET", "", 200},
		{"public, no token, a sibling's image", "8000-sbx_public", "", "same-site", "no-cors", "image", "GET", "", 200},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req := httptest.NewRequest(tt.method, "http://"+tt.host+".preview.test/", nil)
			switch tt.auth {
			case "cookie":
				req.Header.Set("Cookie", "cove_preview="+tt.host+".good")
			case "token":
				req.Header.Set(api.PreviewTokenHeader, "good")
			}
			for k, v := range map[string]string{"Sec-Fetch-Site": tt.site, "Sec-Fetch-Mode": tt.mode, "Sec-Fetch-Dest": tt.dest, "Origin": tt.origin} {
				if v != "" {
					req.Header.Set(k, v)
				}
			}
			w := httptest.NewRecorder()
			r.ServeHTTP(w, req)
			if w.Code != tt.want {
				t.Fatalf("%d, want %d: %s", w.Code, tt.want, w.Body)
			}
			if w.Code == 403 {
				var e api.ErrorResponse
				if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || e.Error.Code != api.CodePermissionDenied || !strings.Contains(e.Error.Message, "another origin") {
					t.Errorf("want permission_denied naming another origin: %s", w.Body)
				}
				return
			}
			// The app's own policy stays; the router's narrows it only
			// for an answer the visitor's cookie let in to a private
			// preview.
			csp := w.Result().Header.Values("Content-Security-Policy")
			want := []string{"default-src 'self'"}
			if tt.auth == "cookie" && tt.host != "8000-sbx_public" {
				want = append(want, "frame-ancestors 'self'")
			}
			if !slices.Equal(csp, want) {
				t.Errorf("Content-Security-Policy %q, want %q", csp, want)
			}
		})
	}
}
