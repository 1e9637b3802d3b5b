package previews

import (
	"net"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/browsertest"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
)

// countingApp notes every request that reaches it (its path and Fetch
// Metadata, a line each, in /workspace/requests.log, written before it
// answers) and answers a page.
const countingApp = `import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        with open('/workspace/requests.log', 'a') as f:
            f.write('%s site=%s mode=%s dest=%s\n' % (self.path, self.headers.get('Sec-Fetch-Site'), self.headers.get('Sec-Fetch-Mode'), self.headers.get('Sec-Fetch-Dest')))
        body = ('<!doctype html><title>B</title><p id=b>B at %s</p>' % self.path).encode()
        self.send_response(200)
        self.send_header('Content-Type', 'text/html')
        self.send_header('Content-Length', str(len(body)))
        self.end_headers(); self.wfile.write(body)
http.server.ThreadingHTTPServer(('0.0.0.0', int(sys.argv[1])), H).serve_forever()
`

// TestPrivatePreviewSubresourcesInChromium: behind a TLS-terminating
// proxy (--preview-scheme https; browsers send Fetch Metadata to secure
// origins only), a visitor opens tenant B's private link in headless
// Chromium, then tenant A's public page, a sibling of the same site. A's
// page loads B's private app as an image, fetches it no-cors with
// credentials and frames it: none carries an Origin, and the browser
// sends B's cookie (SameSite=Lax) along to a sibling of the same site.
// B's app sees none of them. A link on A's page followed to B (a
// top-level navigation) reaches B's app as the visitor.
func TestPrivatePreviewSubresourcesInChromium(t *testing.T) {
	if browsertest.Chromium() == "" {
		t.Skip("chromium is not installed (make test-deps installs Debian's chromium)")
	}
	// The proxy's port is the previews' (their URLs name it).
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, tlsPort, _ := net.SplitHostPort(ln.Addr().String())
	s := startServer(t, "--preview-domain", domain+":"+tlsPort, "--preview-scheme", "https")
	apiURL, err := url.Parse(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httptest.NewUnstartedServer(&httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) {
		pr.SetURL(apiURL)
		pr.Out.Host = pr.In.Host
		pr.SetXForwarded()
	}})
	proxy.Listener.Close()
	proxy.Listener = ln
	proxy.StartTLS()
	t.Cleanup(proxy.Close)

	a := previewTeam(t, s, "fetch-meta-a")
	bt := previewTeam(t, s, "fetch-meta-b")
	sbA := e2etest.Create(t, a, api.CreateSandboxRequest{})
	sbB := e2etest.Create(t, bt, api.CreateSandboxRequest{})
	writeFile(t, a, sbA.ID, "/workspace/index.html", "<!doctype html><title>A</title><p>tenant A's page</p>\n")
	background(t, a, sbA.ID, "cd /workspace && exec python3 -m http.server 8000")
	writeFile(t, bt, sbB.ID, "/workspace/counting.py", countingApp)
	background(t, bt, sbB.ID, "exec python3 /workspace/counting.py 8000")
	pa, err := a.CreatePreview(t.Context(), sbA.ID, api.CreatePreviewRequest{Port: 8000, Visibility: "public"})
	if err != nil {
		t.Fatal(err)
	}
	pb, err := bt.CreatePreview(t.Context(), sbB.ID, api.CreatePreviewRequest{Port: 8000})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(pb.Link, "https://8000-"+sbB.ID+"."+domain+":"+tlsPort+"/") {
		t.Fatalf("link %q", pb.Link)
	}
	waitServing(t, s, previewHost(s, sbA.ID, 8000), "/", nil)
	waitServing(t, s, previewHost(s, sbB.ID, 8000), "/", map[string]string{api.PreviewTokenHeader: pb.Token})

	b := browsertest.Start(t, 2*time.Minute,
		chromedp.Flag("host-resolver-rules", "MAP *."+domain+" 127.0.0.1"),
		chromedp.Flag("ignore-certificate-errors", true))
	appB := strings.TrimSuffix(pb.URL, "/") + "/"
	var visited, loads, navigated string
	b.Run("the visitor opens B's link",
		chromedp.Navigate(pb.Link),
		chromedp.WaitReady("#b", chromedp.ByQuery),
		chromedp.Evaluate(`document.body.innerText`, &visited),
	)
	if visited != "B at /" {
		t.Fatalf("the visitor's own navigation to B's private preview: %q", visited)
	}
	// Each load settles only once its answer came (an error page and a
	// refused frame fire load too), and B's app notes a request before
	// it answers: what is not in its log by then never reached it.
	b.Run("A's page loads B's app as an image, a no-cors fetch and a frame, then follows a link to it",
		chromedp.Navigate(pa.URL),
		chromedp.WaitReady("body", chromedp.ByQuery),
		chromedp.Evaluate(subresourcesJS(appB), &loads, awaitPromise),
		chromedp.Evaluate(`(() => { const a = document.createElement('a'); a.href = '`+appB+`nav'; document.body.append(a); a.click(); })()`, nil),
	)
	// Only B's page has #b in the top document (a frame's is not
	// searched).
	b.Run("the link followed",
		chromedp.WaitReady("#b", chromedp.ByQuery),
		chromedp.Evaluate(`document.body.innerText`, &navigated),
	)
	t.Logf("A's page: %s", loads)
	log := e2etest.MustOK(t, bt, sbB.ID, "cat /workspace/requests.log")
	for _, path := range []string{"/img", "/no-cors", "/frame"} {
		if strings.Contains(log, path+" ") {
			t.Errorf("tenant A's page reached B's private app with the visitor's cookie (%s); B's app saw:\n%s", path, log)
		}
	}
	if navigated != "B at /nav" || !strings.Contains(log, "/nav site=same-site mode=navigate dest=document") {
		t.Errorf("a link on A's page followed to B's private app: page %q; B's app saw:\n%s", navigated, log)
	}
}

// subresourcesJS loads url+"img" as an image, fetches url+"no-cors"
// no-cors with credentials and frames url+"frame", and answers how each
// settled once all have.
func subresourcesJS(url string) string {
	return `(async () => {
  const img = new Promise(r => { const i = new Image(); i.onload = () => r('image loaded'); i.onerror = () => r('image failed'); i.src = '` + url + `img'; });
  const fetched = fetch('` + url + `no-cors', {mode: 'no-cors', credentials: 'include'}).then(() => 'fetch answered', () => 'fetch failed');
  const frame = new Promise(r => { const f = document.createElement('iframe'); f.onload = () => r('frame loaded'); f.src = '` + url + `frame'; document.body.append(f); });
  return (await Promise.all([img, fetched, frame])).join(', ');
})()`
}
