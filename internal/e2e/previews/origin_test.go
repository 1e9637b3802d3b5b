package previews

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/coder/websocket"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/browsertest"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
	"github.com/cove-dev/cove/internal/preview"
)

// earlyHintsApp answers every request with 103 Early Hints and 100
// Continue before its final answer (which httputil.ReverseProxy answers
// by clearing the response's headers after each), and allows its Service
// Worker the whole origin. Its page records where its script ran and
// registers that worker for scope "/".
const earlyHintsApp = `import socket, sys, threading
PAGE = b'''<!doctype html><title>app</title><script>
document.title = 'ran at ' + location.origin;
window.reg = navigator.serviceWorker.register('static/sw.js', {scope: '/'}).then(() => 'registered', e => 'refused: ' + e.name);
</script><p>the app's page</p>'''
SW = b"self.addEventListener('fetch', e => {});"
def handle(c):
    data = b''
    while b'\r\n\r\n' not in data:
        d = c.recv(4096)
        if not d: return
        data += d
    path = data.split(b' ')[1]
    body, ctype = (SW, b'text/javascript') if path.endswith(b'sw.js') else (PAGE, b'text/html')
    c.sendall(b'HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload; as=style\r\n\r\n'
        + b'HTTP/1.1 100 Continue\r\n\r\n'
        + b'HTTP/1.1 200 OK\r\nContent-Type: ' + ctype + b'\r\nService-Worker-Allowed: /\r\nContent-Length: %d\r\nConnection: close\r\n\r\n' % len(body) + body)
    c.close()
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('0.0.0.0', int(sys.argv[1]))); s.listen(16)
while True:
    c, _ = s.accept(); threading.Thread(target=handle, args=(c,), daemon=True).start()
`

// awaitPromise makes chromedp.Evaluate wait for the value's promise.
func awaitPromise(p *runtime.EvaluateParams) *runtime.EvaluateParams { return p.WithAwaitPromise(true) }

// TestPreviewNeverOnTheAPIOrigin: tenant A's app, answering 103 and 100
// before its page, is opened by a visitor in headless Chromium at the
// former path form on the API's host (the console's origin): no script
// of it runs there and no Service Worker registers over the console.
// Opened at its own host, its script runs in its own origin, and its
// worker cannot take the whole origin (Service-Worker-Allowed is
// stripped).
func TestPreviewNeverOnTheAPIOrigin(t *testing.T) {
	if browsertest.Chromium() == "" {
		t.Skip("chromium is not installed (make test-deps installs Debian's chromium)")
	}
	if e2etest.ManagedDir() == "" {
		t.Skip("previews run python3 in the managed image: set COVE_TEST_IMAGES")
	}
	// Chromium resolves every *.localhost to loopback itself.
	s := e2etest.StartServer(t, e2etest.WithManaged, e2etest.WithArgs("--preview-domain", "localhost", "--warm-pool", "0"))
	c := previewTeam(t, s, "early-hints")
	sb := e2etest.Create(t, c, api.CreateSandboxRequest{})
	writeFile(t, c, sb.ID, "/workspace/app.py", earlyHintsApp)
	background(t, c, sb.ID, "exec python3 /workspace/app.py 8000")
	p, err := c.CreatePreview(t.Context(), sb.ID, api.CreatePreviewRequest{Port: 8000, Visibility: "public"})
	if err != nil {
		t.Fatal(err)
	}
	_, apiPort, _ := net.SplitHostPort(strings.TrimPrefix(s.URL, "http://"))
	own := fmt.Sprintf("http://8000-%s.localhost:%s", strings.ToLower(sb.ID), apiPort)
	if p.URL != fmt.Sprintf("http://8000-%s.localhost:%s/", sb.ID, apiPort) {
		t.Fatalf("url %q", p.URL)
	}
	waitServing(t, s, fmt.Sprintf("8000-%s.localhost:%s", sb.ID, apiPort), "/", nil)

	b := browsertest.Start(t, 2*time.Minute)
	var title, reg string
	var scopes []string
	b.Run("the path form on the API's origin",
		chromedp.Navigate(s.URL+"/v1/sandboxes/"+sb.ID+"/ports/8000/"),
		chromedp.WaitReady("body", chromedp.ByQuery),
		chromedp.Title(&title),
		// An inline script has run by the load event; its registration is
		// a promise it kept, awaited here.
		chromedp.Evaluate(`window.reg ? window.reg : 'no script'`, &reg, awaitPromise),
	)
	if strings.HasPrefix(title, "ran at") || reg != "no script" {
		t.Errorf("the app's script ran on the API's origin: title %q, Service Worker %q", title, reg)
	}
	b.Run("the console's origin",
		chromedp.Navigate(s.URL+"/"),
		chromedp.WaitReady("body", chromedp.ByQuery),
		chromedp.Evaluate(`navigator.serviceWorker.getRegistrations().then(rs => rs.map(r => r.scope))`, &scopes, awaitPromise),
	)
	if len(scopes) != 0 {
		t.Errorf("Service Workers registered on the API's origin: %q", scopes)
	}
	b.Run("the preview's own host",
		chromedp.Navigate(p.URL),
		chromedp.WaitReady("body", chromedp.ByQuery),
		chromedp.Title(&title),
		chromedp.Evaluate(`window.reg ? window.reg : 'no script'`, &reg, awaitPromise),
	)
	if title != "ran at "+own {
		t.Errorf("at its own host the app's script should run in its own origin %s: title %q", own, title)
	}
	if reg != "refused: SecurityError" {
		t.Errorf("a worker under /static/ took scope / of the preview: %q", reg)
	}
}

// TestPrivatePreviewOrigin: tenant A's page (its public preview, a sibling
// host of the same site) attacks tenant B's private preview, which a
// visitor opened once through its link. Whatever carries the visitor's
// cookie with A's origin, or Origin: null, is refused: reads, writes and
// WebSocket upgrades; the visitor's own navigations and B's own pages
// work. A cookie A plants for the whole domain never authenticates B,
// before or after the visitor's own.
func TestPrivatePreviewOrigin(t *testing.T) {
	s := startServer(t)
	a := previewTeam(t, s, "origin-a")
	bt := previewTeam(t, s, "origin-b")
	sbA := e2etest.Create(t, a, api.CreateSandboxRequest{})
	sbB := e2etest.Create(t, bt, api.CreateSandboxRequest{})
	writeFile(t, bt, sbB.ID, "/workspace/app.py", hostileApp)
	writeFile(t, bt, sbB.ID, "/workspace/ws.py", wsEcho)
	background(t, bt, sbB.ID, "exec python3 /workspace/app.py 8000")
	background(t, bt, sbB.ID, "exec python3 /workspace/ws.py 8001")
	pb, err := bt.CreatePreview(t.Context(), sbB.ID, api.CreatePreviewRequest{Port: 8000})
	if err != nil {
		t.Fatal(err)
	}
	pws, err := bt.CreatePreview(t.Context(), sbB.ID, api.CreatePreviewRequest{Port: 8001})
	if err != nil {
		t.Fatal(err)
	}
	pa, err := a.CreatePreview(t.Context(), sbA.ID, api.CreatePreviewRequest{Port: 8000})
	if err != nil {
		t.Fatal(err)
	}
	hostB, hostWS := previewHost(s, sbB.ID, 8000), previewHost(s, sbB.ID, 8001)
	waitServing(t, s, hostB, "/", map[string]string{api.PreviewTokenHeader: pb.Token})

	// The visitor opens B's links: the browser keeps their cookies.
	cookieB, cookieWS := redeem(t, s, hostB, pb), redeem(t, s, hostWS, pws)
	// A's own private preview's cookie, which A's page could plant for the
	// whole domain over http.
	cookieA := redeem(t, s, previewHost(s, sbA.ID, 8000), pa)
	originA := "http://" + previewHost(s, sbA.ID, 8000)

	for _, tt := range []struct {
		name, method, origin, cookie string
		want                         int
	}{
		{"a navigation", "GET", "", cookieB, 200},
		{"B's own page", "GET", "http://" + hostB, cookieB, 200},
		{"A's page reads", "GET", originA, cookieB, 403},
		{"A's page posts", "POST", originA, cookieB, 403},
		{"A's page deletes", "DELETE", originA, cookieB, 403},
		{"Origin null", "POST", "null", cookieB, 403},
		{"another site", "GET", "http://attacker.test", cookieB, 403},
		{"A's cookie first", "GET", "", "cove_preview=" + cookieA + "; cove_preview=" + cookieB, 200},
		{"A's cookie last", "GET", "", "cove_preview=" + cookieB + "; cove_preview=" + cookieA, 200},
		{"A's cookie alone", "GET", "", "cove_preview=" + cookieA, 401},
		{"A's token bound to B's host", "GET", "", "cove_preview=" + fmt.Sprintf("8000-%s.%s", sbB.ID, pa.Token), 401},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cookie := tt.cookie
			if !strings.Contains(cookie, "=") {
				cookie = "cove_preview=" + cookie
			}
			hdr := map[string]string{"Cookie": cookie}
			if tt.origin != "" {
				hdr["Origin"] = tt.origin
			}
			resp, body := request(t, s, tt.method, hostB, "/", hdr)
			if resp.StatusCode != tt.want {
				t.Errorf("%d %s; want %d", resp.StatusCode, body, tt.want)
			}
			if tt.want != 200 && strings.Contains(body, "user-agent") {
				t.Errorf("the app answered: %s", body)
			}
		})
	}
	t.Run("A's page opens a WebSocket", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		dial := func(origin string) (*http.Response, error) {
			hdr := http.Header{"Cookie": {"cove_preview=" + cookieWS}, "Origin": {origin}}
			conn, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(s.URL, "http")+"/", &websocket.DialOptions{Host: hostWS, HTTPHeader: hdr})
			if err == nil {
				conn.CloseNow()
			}
			return resp, err
		}
		var err error
		for i := 0; i < 60; i++ { // the echo server was just started
			if _, err = dial("http://" + hostWS); err == nil {
				break
			}
			time.Sleep(500 * time.Millisecond)
		}
		if err != nil {
			t.Fatalf("B's own page: %v", err)
		}
		resp, err := dial(originA)
		if err == nil || resp == nil || resp.StatusCode != 403 {
			t.Errorf("A's page: %v, %+v; want 403", err, resp)
		}
	})
}

// redeem follows a private preview's one-time link as a browser does and
// returns its cookie's value (host-only, bound to the preview).
func redeem(t *testing.T, s *e2etest.Server, host string, p api.Preview) string {
	t.Helper()
	resp, _ := request(t, s, "GET", host, "/"+p.Link[strings.Index(p.Link, "?"):], nil)
	for _, ck := range resp.Cookies() {
		if ck.Name == "cove_preview" {
			if ck.Domain != "" || !ck.HttpOnly || ck.Path != "/" {
				t.Fatalf("cookie %+v: want host-only, HttpOnly, path /", ck)
			}
			return ck.Value
		}
	}
	t.Fatalf("the link set no cookie: %d %v", resp.StatusCode, resp.Header)
	return ""
}

// TestPreviewCookieOverHTTPS: behind a TLS-terminating proxy
// (--preview-scheme https), a link sets __Host-cove_preview, Secure, at
// path / without a Domain, so no sibling can set one for the domain; the
// http cookie's name no longer authenticates.
func TestPreviewCookieOverHTTPS(t *testing.T) {
	s := e2etest.StartServer(t, e2etest.WithArgs("--preview-domain", domain, "--preview-scheme", "https", "--warm-pool", "0"))
	c := previewTeam(t, s, "tls")
	sb := e2etest.Create(t, c, api.CreateSandboxRequest{})
	p, err := c.CreatePreview(t.Context(), sb.ID, api.CreatePreviewRequest{Port: 8000})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(p.URL, "https://8000-"+sb.ID+"."+domain+":") {
		t.Fatalf("url %q", p.URL)
	}
	host := previewHost(s, sb.ID, 8000)
	resp, _ := request(t, s, "GET", host, "/"+p.Link[strings.Index(p.Link, "?"):], map[string]string{"X-Forwarded-Proto": "https"})
	var value string
	for _, ck := range resp.Cookies() {
		if ck.Name != "__Host-cove_preview" || !ck.Secure || ck.Domain != "" || ck.Path != "/" || !ck.HttpOnly {
			t.Errorf("cookie %+v: want __Host-cove_preview, Secure, HttpOnly, path /, no Domain", ck)
		}
		value = ck.Value
	}
	// Nothing listens on the port: let in, the request reaches the dial
	// (503); refused, it stops at the token (401).
	for _, tt := range []struct {
		cookie string
		want   int
	}{
		{"__Host-cove_preview=" + value, 503},
		{"cove_preview=" + value, 401},
	} {
		if resp, body := request(t, s, "GET", host, "/", map[string]string{"Cookie": tt.cookie}); resp.StatusCode != tt.want {
			t.Errorf("%s: %d %s; want %d", tt.cookie, resp.StatusCode, body, tt.want)
		}
	}
}

// TestPreviewCap: a tenant publishes at most --max-previews-per-sandbox
// previews of a sandbox (409 naming the cap and how to delete one);
// deleting one makes room, and the fence's published set holds exactly
// the previews' ports throughout.
func TestPreviewCap(t *testing.T) {
	s := e2etest.StartServer(t, e2etest.WithArgs("--preview-domain", domain, "--max-previews-per-sandbox", "3", "--warm-pool", "0"))
	c := previewTeam(t, s, "many")
	sb := e2etest.Create(t, c, api.CreateSandboxRequest{})
	addr := sandboxAddr(t, s, sb.ID)
	var ids []string
	for port := 9000; port < 9003; port++ {
		p, err := c.CreatePreview(t.Context(), sb.ID, api.CreatePreviewRequest{Port: port, Visibility: "public"})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, p.ID)
	}
	_, err := c.CreatePreview(t.Context(), sb.ID, api.CreatePreviewRequest{Port: 9003, Visibility: "public"})
	var e *api.Error
	if !errors.As(err, &e) || e.Code != api.CodeConflict || !strings.Contains(e.Message, "--max-previews-per-sandbox") || !strings.Contains(e.Message, "DELETE /v1/sandboxes/"+sb.ID+"/previews/") {
		t.Fatalf("the fourth preview: %v; want 409 naming the cap and how to delete one", err)
	}
	published(t, s, addr, 9000, 9001, 9002)
	if err := c.DeletePreview(t.Context(), sb.ID, ids[1]); err != nil {
		t.Fatal(err)
	}
	published(t, s, addr, 9000, 9002)
	if _, err := c.CreatePreview(t.Context(), sb.ID, api.CreatePreviewRequest{Port: 9003, Visibility: "public"}); err != nil {
		t.Fatalf("after a delete: %v", err)
	}
	published(t, s, addr, 9000, 9002, 9003)
}

// published checks that the fence's published set holds exactly these
// ports of the sandbox's address.
func published(t *testing.T, s *e2etest.Server, addr string, ports ...int) {
	t.Helper()
	out, err := exec.Command("nft", "list", "set", "inet", s.Table, "published").CombinedOutput()
	if err != nil {
		t.Fatalf("nft: %v %s", err, out)
	}
	n := strings.Count(string(out), addr+" . ")
	for _, p := range ports {
		if !strings.Contains(string(out), fmt.Sprintf("%s . %d", addr, p)) {
			t.Errorf("port %d is not in the published set:\n%s", p, out)
		}
	}
	if n != len(ports) {
		t.Errorf("%d elements of %s in the published set, want %d:\n%s", n, addr, len(ports), out)
	}
}

// TestPrivatePreviewOriginInChromium: the attack above in a browser. A
// visitor opens tenant B's private links in headless Chromium (the
// preview domain resolves to loopback; its hosts are one site, as on a
// real domain), then tenant A's public page, whose script opens a
// WebSocket to B's private preview: the browser sends B's cookie along,
// and the upgrade is refused; the visitor's own navigation to B works.
// A frame of B's private app in A's page shows nothing of it (over http
// the browser sends no Fetch Metadata, so frame-ancestors stops it).
func TestPrivatePreviewOriginInChromium(t *testing.T) {
	if browsertest.Chromium() == "" {
		t.Skip("chromium is not installed (make test-deps installs Debian's chromium)")
	}
	s := startServer(t)
	a := previewTeam(t, s, "browser-a")
	bt := previewTeam(t, s, "browser-b")
	sbA := e2etest.Create(t, a, api.CreateSandboxRequest{})
	sbB := e2etest.Create(t, bt, api.CreateSandboxRequest{})
	writeFile(t, a, sbA.ID, "/workspace/index.html", "<!doctype html><title>A</title><p>tenant A's page</p>\n")
	background(t, a, sbA.ID, "cd /workspace && exec python3 -m http.server 8000")
	writeFile(t, bt, sbB.ID, "/workspace/app.py", hostileApp)
	writeFile(t, bt, sbB.ID, "/workspace/ws.py", wsEcho)
	background(t, bt, sbB.ID, "exec python3 /workspace/app.py 8000")
	background(t, bt, sbB.ID, "exec python3 /workspace/ws.py 8001")
	pa, err := a.CreatePreview(t.Context(), sbA.ID, api.CreatePreviewRequest{Port: 8000, Visibility: "public"})
	if err != nil {
		t.Fatal(err)
	}
	pb, err := bt.CreatePreview(t.Context(), sbB.ID, api.CreatePreviewRequest{Port: 8000})
	if err != nil {
		t.Fatal(err)
	}
	pws, err := bt.CreatePreview(t.Context(), sbB.ID, api.CreatePreviewRequest{Port: 8001})
	if err != nil {
		t.Fatal(err)
	}
	waitServing(t, s, previewHost(s, sbA.ID, 8000), "/", nil)
	waitServing(t, s, previewHost(s, sbB.ID, 8000), "/", map[string]string{api.PreviewTokenHeader: pb.Token})

	b := browsertest.Start(t, 2*time.Minute, chromedp.Flag("host-resolver-rules", "MAP *."+domain+" 127.0.0.1"))
	// The WebSocket app answers no page, so the cookie its link would
	// set is set as the browser would keep it: host-only, HttpOnly, Lax.
	wsCookie := redeem(t, s, previewHost(s, sbB.ID, 8001), pws)
	var own string
	b.Run("the visitor opens B's links",
		network.SetCookie(preview.CookieName, wsCookie).WithURL("http://"+previewHost(s, sbB.ID, 8001)+"/").
			WithHTTPOnly(true).WithSameSite(network.CookieSameSiteLax),
		chromedp.Navigate(pb.Link),
		chromedp.WaitReady("body", chromedp.ByQuery),
		chromedp.Evaluate(`document.body.innerText`, &own),
	)
	if !strings.Contains(own, `"user-agent"`) {
		t.Fatalf("the visitor's own navigation to B's preview: %q", own)
	}
	wsB := "ws://" + previewHost(s, sbB.ID, 8001) + "/"
	waitWebSocket(t, s, previewHost(s, sbB.ID, 8001), http.Header{api.PreviewTokenHeader: {pws.Token}})
	var wsA string
	b.Run("A's page",
		chromedp.Navigate(pa.URL),
		chromedp.WaitReady("body", chromedp.ByQuery),
		chromedp.Evaluate(wsOpenJS(wsB), &wsA, awaitPromise),
	)
	if wsA != "refused" {
		t.Errorf("tenant A's page opened B's private WebSocket with the visitor's cookie: %q", wsA)
	}
	// Over http the browser sends no Fetch Metadata (secure origins
	// alone get it), so the frame's request reaches B's app; what the
	// app answers is not shown inside A's page.
	var frames *page.FrameTree
	b.Run("A's page frames B's private app",
		chromedp.Evaluate(`new Promise(r => { const f = document.createElement('iframe'); f.onload = () => r(); f.src = '`+pb.URL+`framed'; document.body.append(f); })`, nil, awaitPromise),
		chromedp.ActionFunc(func(ctx context.Context) (err error) {
			frames, err = page.GetFrameTree().Do(ctx)
			return err
		}),
	)
	// Chromium shows its error page in place of a frame its policy
	// refuses.
	if len(frames.ChildFrames) != 1 || frames.ChildFrames[0].Frame.UnreachableURL != pb.URL+"framed" {
		for _, f := range frames.ChildFrames {
			t.Logf("frame %s (unreachable %q)", f.Frame.URL, f.Frame.UnreachableURL)
		}
		t.Errorf("tenant A's page shows B's private app in a frame")
	}
}

// wsOpenJS opens a WebSocket and answers "open" or "refused".
func wsOpenJS(url string) string {
	return `new Promise(r => { const ws = new WebSocket('` + url + `'); ws.onopen = () => { ws.close(); r('open'); }; ws.onerror = () => r('refused'); })`
}

// waitWebSocket waits until a WebSocket preview at host (its app just
// started) accepts an upgrade with hdr, at most a minute.
func waitWebSocket(t *testing.T, s *e2etest.Server, host string, hdr http.Header) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var err error
	for i := 0; i < 60; i++ {
		var conn *websocket.Conn
		if conn, _, err = websocket.Dial(ctx, "ws"+strings.TrimPrefix(s.URL, "http")+"/", &websocket.DialOptions{Host: host, HTTPHeader: hdr}); err == nil {
			conn.CloseNow()
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatalf("the WebSocket app behind %s never answered: %v", host, err)
}
