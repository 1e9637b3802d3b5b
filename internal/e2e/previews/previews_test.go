package previews

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
	cove "github.com/cove-dev/cove/sdk/go"
)

// domain is the preview domain of the test servers: requests name it in
// their Host header; nothing resolves it.
const domain = "preview.test"

// wsEcho is a WebSocket echo server of the standard library alone.
const wsEcho = `import socket, hashlib, base64, threading, struct, sys
def handle(c):
    data = b''
    while b'\r\n\r\n' not in data:
        d = c.recv(4096)
        if not d: return
        data += d
    key = [l.split(b':', 1)[1].strip() for l in data.split(b'\r\n') if l.lower().startswith(b'sec-websocket-key:')][0]
    acc = base64.b64encode(hashlib.sha1(key + b'258EAFA5-E914-47DA-95CA-C5AB0DC85B11').digest())
    c.sendall(b'HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ' + acc + b'\r\n\r\n')
    f = c.makefile('rb')
    while True:
        h = f.read(2)
        if len(h) < 2: return
        op, n = h[0] & 15, h[1] & 127
        if n == 126: n = struct.unpack('>H', f.read(2))[0]
        elif n == 127: n = struct.unpack('>Q', f.read(8))[0]
        mask = f.read(4); p = bytearray(f.read(n))
        for i in range(n): p[i] ^= mask[i % 4]
        if op == 8:
            c.sendall(b'\x88\x00'); return
        hdr = bytes([0x80 | op]) + (bytes([n]) if n < 126 else (b'\x7e' + struct.pack('>H', n) if n < 65536 else b'\x7f' + struct.pack('>Q', n)))
        c.sendall(hdr + bytes(p))
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('0.0.0.0', int(sys.argv[1]))); s.listen(16)
while True:
    c, _ = s.accept(); threading.Thread(target=handle, args=(c,), daemon=True).start()
`

// hostileApp shows what reaches the app (the request's headers) and tries
// to set a cookie for every preview of the domain, and an SSE stream.
const hostileApp = `import http.server, sys, json, time
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path.startswith('/events'):
            self.send_response(200); self.send_header('Content-Type', 'text/event-stream'); self.end_headers()
            for i in range(3):
                self.wfile.write(b'data: tick %d\n\n' % i); self.wfile.flush(); time.sleep(0.2)
            return
        body = json.dumps({k.lower(): v for k, v in self.headers.items()}).encode()
        self.send_response(200)
        self.send_header('Set-Cookie', 'planted=1; Domain=` + domain + `; Path=/')
        self.send_header('Content-Type', 'application/json')
        self.send_header('Content-Length', str(len(body)))
        self.end_headers(); self.wfile.write(body)
http.server.ThreadingHTTPServer(('0.0.0.0', int(sys.argv[1])), H).serve_forever()
`

func startServer(t *testing.T, args ...string) *e2etest.Server {
	t.Helper()
	if e2etest.ManagedDir() == "" {
		t.Skip("previews run python3 in the managed image: set COVE_TEST_IMAGES")
	}
	return e2etest.StartServer(t, e2etest.WithManaged, e2etest.WithArgs(append([]string{"--preview-domain", domain, "--warm-pool", "0"}, args...)...))
}

// previewTeam is a team admitted to previews.
func previewTeam(t *testing.T, s *e2etest.Server, name string) *cove.Client {
	t.Helper()
	c := s.NewTeam(name)
	me, err := c.Admission(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Admin.SetAdmission(t.Context(), me.Team.ID, api.Admission{ManagedEnvironment: true, Preview: true}); err != nil {
		t.Fatal(err)
	}
	return c
}

// background starts a long-running command in the sandbox.
func background(t *testing.T, c *cove.Client, ref, command string, opts ...func(*api.CreateCommandRequest)) {
	t.Helper()
	req := api.CreateCommandRequest{Command: command}
	for _, o := range opts {
		o(&req)
	}
	if _, err := c.Exec(t.Context(), ref, req); err != nil {
		t.Fatalf("start %q: %v", command, err)
	}
}

// writeFile puts content at path in the sandbox.
func writeFile(t *testing.T, c *cove.Client, ref, path, content string) {
	t.Helper()
	if _, err := c.WriteFile(t.Context(), ref, path, strings.NewReader(content)); err != nil {
		t.Fatal(err)
	}
}

// request sends a request to the server's API listener with the given
// Host (a preview's) and headers.
func request(t *testing.T, s *e2etest.Server, method, host, path string, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, s.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s (Host %s): %v", method, path, host, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// previewHost is the Host of a sandbox's port on the test server.
func previewHost(s *e2etest.Server, sandboxID string, port int) string {
	_, apiPort, _ := net.SplitHostPort(strings.TrimPrefix(s.URL, "http://"))
	return fmt.Sprintf("%d-%s.%s:%s", port, sandboxID, domain, apiPort)
}

// waitServing waits until the app behind a preview answers (it was just
// started in the background), at most a minute.
func waitServing(t *testing.T, s *e2etest.Server, host, path string, hdr map[string]string) {
	t.Helper()
	for i := 0; i < 120; i++ {
		resp, _ := request(t, s, "GET", host, path, hdr)
		if resp.StatusCode == http.StatusOK {
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatalf("the app behind %s never answered 200", host)
}

// sandboxAddr is the sandbox's address on the node, from its link file.
func sandboxAddr(t *testing.T, s *e2etest.Server, sandboxID string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(s.DataDir, "net", "links", sandboxID+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var l struct {
		SandboxAddr string `json:"sandbox_addr"`
	}
	if err := json.Unmarshal(b, &l); err != nil {
		t.Fatal(err)
	}
	return l.SandboxAddr
}

// TestPreviewRouting: python3 -m http.server in the managed image, as a
// private preview, is reached by Host with its token, and refused
// without; the former path form answers 404 naming the preview's host; a
// one-time link sets a cookie of the preview's host and is used up; a
// public preview needs nothing.
func TestPreviewRouting(t *testing.T) {
	s := startServer(t)
	c := previewTeam(t, s, "web")
	sb := e2etest.Create(t, c, api.CreateSandboxRequest{})
	writeFile(t, c, sb.ID, "/workspace/index.html", "hello from the sandbox\n")
	background(t, c, sb.ID, "cd /workspace && exec python3 -m http.server 8000")

	p, err := c.CreatePreview(t.Context(), sb.ID, api.CreatePreviewRequest{Port: 8000})
	if err != nil {
		t.Fatal(err)
	}
	if p.Visibility != "private" || !strings.HasPrefix(p.Token, "cpt_") || p.Link == "" || !strings.HasPrefix(p.ID, "prv_") {
		t.Fatalf("preview %+v", p)
	}
	host := previewHost(s, sb.ID, 8000)
	if want := "http://" + host + "/"; p.URL != want {
		t.Errorf("url %q, want %q", p.URL, want)
	}
	tok := map[string]string{api.PreviewTokenHeader: p.Token}
	waitServing(t, s, host, "/", tok)

	t.Run("host with token", func(t *testing.T) {
		resp, body := request(t, s, "GET", host, "/index.html", tok)
		if resp.StatusCode != 200 || body != "hello from the sandbox\n" {
			t.Errorf("%d %q", resp.StatusCode, body)
		}
	})
	t.Run("host without token", func(t *testing.T) {
		resp, body := request(t, s, "GET", host, "/index.html", nil)
		if resp.StatusCode != 401 || !strings.Contains(body, "unauthenticated") {
			t.Errorf("%d %q", resp.StatusCode, body)
		}
	})
	t.Run("host with another token", func(t *testing.T) {
		resp, _ := request(t, s, "GET", host, "/index.html", map[string]string{api.PreviewTokenHeader: "cpt_" + strings.Repeat("0", 48)})
		if resp.StatusCode != 401 {
			t.Errorf("%d", resp.StatusCode)
		}
	})
	t.Run("path form is gone", func(t *testing.T) {
		resp, body := request(t, s, "GET", "", "/v1/sandboxes/"+sb.ID+"/ports/8000/index.html", tok)
		if resp.StatusCode != 404 || strings.Contains(body, "hello from the sandbox") || !strings.Contains(body, "http://"+host+"/index.html") {
			t.Errorf("%d %q: want a 404 naming the preview's host", resp.StatusCode, body)
		}
	})
	t.Run("one-time link", func(t *testing.T) {
		code := p.Link[strings.Index(p.Link, "?"):]
		resp, _ := request(t, s, "GET", host, "/"+code, nil)
		if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/" {
			t.Fatalf("%d, Location %q", resp.StatusCode, resp.Header.Get("Location"))
		}
		var cookie *http.Cookie
		for _, ck := range resp.Cookies() {
			if ck.Name == "cove_preview" {
				cookie = ck
			}
		}
		if cookie == nil || cookie.Domain != "" || !cookie.HttpOnly || cookie.Path != "/" {
			t.Fatalf("cookie %+v: want a host-only HttpOnly cookie", cookie)
		}
		resp, body := request(t, s, "GET", host, "/index.html", map[string]string{"Cookie": "cove_preview=" + cookie.Value})
		if resp.StatusCode != 200 || body != "hello from the sandbox\n" {
			t.Errorf("with the cookie: %d %q", resp.StatusCode, body)
		}
		if resp, _ := request(t, s, "GET", host, "/"+code, nil); resp.StatusCode != 401 {
			t.Errorf("the link used again: %d, want 401", resp.StatusCode)
		}
	})
	t.Run("public", func(t *testing.T) {
		background(t, c, sb.ID, "cd /workspace && exec python3 -m http.server 8080")
		if _, err := c.CreatePreview(t.Context(), sb.ID, api.CreatePreviewRequest{Port: 8080, Visibility: "public"}); err != nil {
			t.Fatal(err)
		}
		waitServing(t, s, previewHost(s, sb.ID, 8080), "/index.html", nil)
	})
	t.Run("list and delete", func(t *testing.T) {
		ps, err := c.Previews(t.Context(), sb.ID)
		if err != nil || len(ps) != 2 || ps[0].Token != "" {
			t.Fatalf("%v %+v", err, ps)
		}
		if err := c.DeletePreview(t.Context(), sb.ID, ps[1].ID); err != nil {
			t.Fatal(err)
		}
		if resp, _ := request(t, s, "GET", previewHost(s, sb.ID, 8080), "/index.html", nil); resp.StatusCode != 404 {
			t.Errorf("deleted preview: %d, want 404", resp.StatusCode)
		}
		// Its port is closed to the node again.
		if err := dial(sandboxAddr(t, s, sb.ID), 8080); err == nil {
			t.Errorf("the node still reaches port 8080 of the sandbox after the preview went")
		}
	})
	t.Run("cli", func(t *testing.T) {
		keys := s.Keys()
		cmd := exec.Command(filepath.Join(e2etest.BinDir(), "cove"), "--url", s.URL, "preview", sb.ID, "8081", "--public")
		cmd.Env = append(os.Environ(), "COVE_API_KEY="+keys[len(keys)-1], "HOME="+t.TempDir())
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%v: %s", err, stderr.String())
		}
		if want := "http://" + previewHost(s, sb.ID, 8081) + "/\n"; string(out) != want {
			t.Errorf("cove preview printed %q, want %q", out, want)
		}
	})
}

// TestPreviewWebSocket: a WebSocket echo server in the sandbox answers
// through the preview; server-sent events stream.
func TestPreviewWebSocket(t *testing.T) {
	s := startServer(t)
	c := previewTeam(t, s, "ws")
	sb := e2etest.Create(t, c, api.CreateSandboxRequest{})
	writeFile(t, c, sb.ID, "/workspace/ws.py", wsEcho)
	writeFile(t, c, sb.ID, "/workspace/app.py", hostileApp)
	background(t, c, sb.ID, "exec python3 /workspace/ws.py 8001")
	background(t, c, sb.ID, "exec python3 /workspace/app.py 8002")
	for _, port := range []int{8001, 8002} {
		if _, err := c.CreatePreview(t.Context(), sb.ID, api.CreatePreviewRequest{Port: port, Visibility: "public"}); err != nil {
			t.Fatal(err)
		}
	}
	waitServing(t, s, previewHost(s, sb.ID, 8002), "/", nil)

	for _, form := range []struct{ name, host, path string }{
		{"host", previewHost(s, sb.ID, 8001), "/"},
	} {
		t.Run(form.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			hdr := http.Header{}
			if form.host != "" {
				hdr.Set("Host", form.host)
			}
			var conn *websocket.Conn
			var err error
			for i := 0; i < 60; i++ { // the echo server was just started
				if conn, _, err = websocket.Dial(ctx, "ws"+strings.TrimPrefix(s.URL, "http")+form.path, &websocket.DialOptions{Host: form.host, HTTPHeader: hdr}); err == nil {
					break
				}
				time.Sleep(500 * time.Millisecond)
			}
			if err != nil {
				t.Fatal(err)
			}
			defer conn.CloseNow()
			conn.SetReadLimit(1 << 20)
			for _, msg := range []string{"hello", strings.Repeat("x", 70000)} {
				if err := conn.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
					t.Fatal(err)
				}
				_, got, err := conn.Read(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if string(got) != msg {
					t.Errorf("echo of %d bytes: got %d bytes", len(msg), len(got))
				}
			}
			conn.Close(websocket.StatusNormalClosure, "")
		})
	}
	t.Run("server-sent events", func(t *testing.T) {
		req, _ := http.NewRequestWithContext(t.Context(), "GET", s.URL+"/events", nil)
		req.Host = previewHost(s, sb.ID, 8002)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
			t.Errorf("Content-Type %q", ct)
		}
		sc := bufio.NewScanner(resp.Body)
		var ticks []string
		for sc.Scan() {
			if l := sc.Text(); strings.HasPrefix(l, "data: ") {
				ticks = append(ticks, l)
			}
		}
		if len(ticks) != 3 {
			t.Errorf("ticks %q", ticks)
		}
	})
}

// dial connects from the node (this root process) to addr:port.
func dial(addr string, port int) error {
	c, err := net.DialTimeout("tcp4", net.JoinHostPort(addr, fmt.Sprint(port)), 3*time.Second)
	if err == nil {
		c.Close()
	}
	return err
}
