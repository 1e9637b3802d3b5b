package netpolicy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"
)

// readResponses reads HTTP responses from c until it ends, and reports
// whether it ended cleanly (EOF) or with a reset.
func readResponses(t *testing.T, c net.Conn) (bodies []string, resets bool) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second)) // a hang fails the test; no outcome depends on it
	br := bufio.NewReader(c)
	for {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return bodies, false
			}
			if errors.Is(err, net.ErrClosed) {
				t.Fatal(err)
			}
			return bodies, true
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return bodies, true
		}
		bodies = append(bodies, fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(b))))
	}
}

func hostsSeen(s *testServers) []string {
	var out []string
	for _, r := range s.requests() {
		out = append(out, r.Host+r.Path)
	}
	return out
}

// TestGatewayPipelinedRequests: two requests in one write, the second for
// a host the policy denies, both for the address of an allowed one. The
// gateway forwards the first alone (asking the server to close after it),
// and the second never reaches the server.
func TestGatewayPipelinedRequests(t *testing.T) {
	s := startServers(t)
	h := newHarness(t, harnessConfig{Routes: s.routes()}, MustParse("api.example.test"), Policy{})
	h.lookup(t, "api.example.test")
	c := h.dial(t, netip.AddrPortFrom(apiAddr, 80))
	if _, err := io.WriteString(c, "GET /one HTTP/1.1\r\nHost: api.example.test\r\n\r\n"+
		"GET /two HTTP/1.1\r\nHost: other.example.test\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	bodies, _ := readResponses(t, c)
	if len(bodies) != 1 || bodies[0] != "200 host=api.example.test" {
		t.Errorf("responses %q, want only the first request's", bodies)
	}
	// The connection has ended: the server read whatever it was sent.
	if got := hostsSeen(s); len(got) != 1 || got[0] != "api.example.test/one" {
		t.Errorf("the server read %q, want only api.example.test/one", got)
	}
	if r := s.requests(); len(r) == 1 && r[0].Connection != "close" {
		t.Errorf("the server got Connection %q, want close", r[0].Connection)
	}
	if o := h.reg.Observations(sandboxID); len(o) != 1 || o[0].Destination != "api.example.test" || o[0].Decision != Allowed {
		t.Errorf("observations %+v", o)
	}
}

// TestGatewayKeepAliveRequest: a client that keeps the connection after a
// response and sends another request on it, for a denied host, reaches
// nothing; the response told it the connection closes.
func TestGatewayKeepAliveRequest(t *testing.T) {
	s := startServers(t)
	h := newHarness(t, harnessConfig{Routes: s.routes()}, MustParse("api.example.test"), Policy{})
	h.lookup(t, "api.example.test")
	c := h.dial(t, netip.AddrPortFrom(apiAddr, 80))
	br := bufio.NewReader(c)
	io.WriteString(c, "GET /one HTTP/1.1\r\nHost: api.example.test\r\nConnection: keep-alive\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != 200 || !resp.Close {
		t.Errorf("first response %d, close %v; want 200 and Connection: close", resp.StatusCode, resp.Close)
	}
	io.WriteString(c, "GET /two HTTP/1.1\r\nHost: other.example.test\r\n\r\n") // may fail: the gateway is closing
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if resp, err := http.ReadResponse(br, nil); err == nil {
		t.Errorf("a second request on the connection was answered: %d", resp.StatusCode)
	}
	if got := hostsSeen(s); len(got) != 1 {
		t.Errorf("the server read %q, want one request", got)
	}
}

// TestGatewayRequestBodies: the body of the one request goes through
// whole, by Content-Length or chunks, and nothing after it does.
func TestGatewayRequestBodies(t *testing.T) {
	s := startServers(t)
	h := newHarness(t, harnessConfig{Routes: s.routes()}, MustParse("api.example.test"), Policy{})
	h.lookup(t, "api.example.test")
	smuggled := "GET /smuggled HTTP/1.1\r\nHost: other.example.test\r\n\r\n"
	big := strings.Repeat("b", 300<<10)
	for _, tt := range []struct {
		name, request, body string
	}{
		{"content-length", "POST /echo-body HTTP/1.1\r\nHost: api.example.test\r\nContent-Length: 5\r\n\r\nhello", "hello"},
		{"content-length, large", fmt.Sprintf("POST /echo-body HTTP/1.1\r\nHost: api.example.test\r\nContent-Length: %d\r\n\r\n%s", len(big), big), big},
		{"chunked", "POST /echo-body HTTP/1.1\r\nHost: api.example.test\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: 1\r\n\r\n", "hello world"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			before := len(s.requests())
			c := h.dial(t, netip.AddrPortFrom(apiAddr, 80))
			go io.WriteString(c, tt.request+smuggled) // large bodies fill the socket buffers
			bodies, _ := readResponses(t, c)
			if len(bodies) != 1 || bodies[0] != "200 "+tt.body {
				t.Errorf("responses: %d, first %.40q", len(bodies), bodies)
			}
			if got := s.requests()[before:]; len(got) != 1 || got[0].Body != tt.body {
				t.Errorf("the server read %d requests", len(got))
			}
		})
	}
}

// TestGatewayUpgrades: a WebSocket handshake the server accepts becomes a
// relay of frames; an h2c upgrade, which would carry many requests, is
// dropped and the request served as HTTP/1.1.
func TestGatewayUpgrades(t *testing.T) {
	s := startServers(t)
	h := newHarness(t, harnessConfig{Routes: s.routes()}, MustParse("api.example.test"), Policy{})
	h.lookup(t, "api.example.test")

	t.Run("websocket", func(t *testing.T) {
		c := h.dial(t, netip.AddrPortFrom(apiAddr, 80))
		c.SetDeadline(time.Now().Add(10 * time.Second))
		io.WriteString(c, "GET /ws HTTP/1.1\r\nHost: api.example.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n\r\n")
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != 101 {
			t.Fatalf("handshake: %v %v", resp, err)
		}
		// After the switch, bytes are frames, whatever they look like.
		frame := "GET / HTTP/1.1\r\nHost: other.example.test\r\n\r\n"
		io.WriteString(c, frame)
		got := make([]byte, len(frame))
		if _, err := io.ReadFull(br, got); err != nil || string(got) != frame {
			t.Fatalf("echo through the relay: %q %v", got, err)
		}
		r := s.requests()
		if last := r[len(r)-1]; last.Upgrade != "websocket" || last.Connection != "Upgrade, close" {
			t.Errorf("the server got Upgrade %q, Connection %q", last.Upgrade, last.Connection)
		}
	})
	t.Run("websocket refused", func(t *testing.T) {
		// /ws-less path: the server answers 200; what the client sends next
		// is not forwarded.
		before := len(s.requests())
		c := h.dial(t, netip.AddrPortFrom(apiAddr, 80))
		io.WriteString(c, "GET /plain HTTP/1.1\r\nHost: api.example.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"+
			"GET /two HTTP/1.1\r\nHost: other.example.test\r\n\r\n")
		bodies, _ := readResponses(t, c)
		if len(bodies) != 1 || !strings.HasPrefix(bodies[0], "200 ") {
			t.Errorf("responses %q", bodies)
		}
		if got := s.requests()[before:]; len(got) != 1 {
			t.Errorf("the server read %+v", got)
		}
	})
	t.Run("h2c", func(t *testing.T) {
		c := h.dial(t, netip.AddrPortFrom(apiAddr, 80))
		io.WriteString(c, "GET /h2c HTTP/1.1\r\nHost: api.example.test\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n\r\n")
		bodies, _ := readResponses(t, c)
		if len(bodies) != 1 || bodies[0] != "200 host=api.example.test" {
			t.Errorf("responses %q", bodies)
		}
		r := s.requests()
		if last := r[len(r)-1]; last.Path != "/h2c" || last.Upgrade != "" || last.Connection != "close" {
			t.Errorf("the server got %+v", last)
		}
	})
}

// TestGatewayHTTPNeverRaw: bytes that a server would read as an HTTP
// request are never spliced unchecked. Before, what the gateway could not
// parse in time (an unknown method, a leading empty line, a header cut
// short, a client that waits before it speaks) went through as raw bytes
// whenever the address was allowed, with any Host in it.
func TestGatewayHTTPNeverRaw(t *testing.T) {
	s := startServers(t)
	const denied = "Host: other.example.test\r\n"
	tests := []struct {
		name   string
		send   string
		cut    bool   // the client ends its side after send: what it sent is all there is
		silent bool   // the gateway decides by address before the client speaks
		want   string // "403", "400", "reset" or "200"
	}{
		{name: "unknown method", send: "PROPFIND / HTTP/1.1\r\n" + denied + "\r\n", want: "403"},
		{name: "lower-case method", send: "get / HTTP/1.1\r\n" + denied + "\r\n", want: "403"},
		{name: "leading empty line", send: "\r\nGET / HTTP/1.1\r\n" + denied + "\r\n", want: "400"},
		{name: "lower-case version", send: "GET / http/1.1\r\n" + denied + "\r\n", want: "400"},
		{name: "bare LF", send: "GET / HTTP/1.1\n" + denied + "\n", cut: true, want: "400"},
		{name: "header cut short", send: "GET / HTTP/1.1\r\n" + denied, cut: true, want: "400"},
		// A client that stops and waits: the gateway gives up on the
		// header (HeaderTimeout) and refuses, rather than splicing what it
		// has and then whatever comes.
		{name: "header, then waits", send: "GET / HTTP/1.1\r\n" + denied, want: "400"},
		{name: "request line, then waits", send: "GET / HT", want: "400"},
		{name: "two Host headers", send: "GET / HTTP/1.1\r\nHost: api.example.test\r\n" + denied + "\r\n", want: "400"},
		{name: "folded header", send: "GET / HTTP/1.1\r\nHost: api.example.test\r\nX: a\r\n b\r\n\r\n", want: "400"},
		{name: "URL and Host differ", send: "GET http://api.example.test/ HTTP/1.1\r\n" + denied + "\r\n", want: "400"},
		{name: "both body lengths", send: "POST / HTTP/1.1\r\nHost: api.example.test\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", want: "400"},
		{name: "header too large", send: "GET / HTTP/1.1\r\n" + denied + "X: " + strings.Repeat("x", maxHTTPHeader) + "\r\n\r\n", want: "400"},
		{name: "silent, then a denied Host", silent: true, send: "GET / HTTP/1.1\r\n" + denied + "\r\n", want: "reset"},
		{name: "silent, then an allowed Host", silent: true, send: "GET / HTTP/1.1\r\nHost: api.example.test\r\n\r\n", want: "200"},
		{name: "silent, then a bad request", silent: true, send: "GET / HTTP/1.1\r\nHost: api.example.test\r\n" + denied + "\r\n", want: "reset"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var gc GatewayConfig
			if tt.silent {
				// The first read's deadline has passed before it begins:
				// the gateway always decides by address first.
				gc.SniffTimeout = time.Nanosecond
			}
			h := newHarness(t, harnessConfig{Routes: s.routes(), Gateway: gc}, MustParse("api.example.test"), Policy{})
			h.lookup(t, "api.example.test")
			before := len(s.requests())
			c := h.dial(t, netip.AddrPortFrom(apiAddr, 80))
			io.WriteString(c, tt.send)
			if tt.cut {
				c.CloseWrite()
			}
			bodies, resets := readResponses(t, c)
			got := "reset"
			if len(bodies) > 0 {
				got, _, _ = strings.Cut(bodies[0], " ")
			} else if !resets {
				got = "closed"
			}
			if got != tt.want {
				t.Errorf("got %s (%q), want %s", got, bodies, tt.want)
			}
			want := 0
			if tt.want == "200" {
				want = 1
			}
			if r := s.requests()[before:]; len(r) != want {
				t.Errorf("the server read %+v", r)
			}
		})
	}
}

// TestGatewayConnectTunnelHost: plain HTTP inside a CONNECT tunnel must be
// for the host the tunnel was allowed to, and goes alone.
func TestGatewayConnectTunnelHost(t *testing.T) {
	s := startServers(t)
	h := newHarness(t, harnessConfig{Routes: s.routes()}, MustParse("api.example.test"), Policy{})
	for _, tt := range []struct {
		name, host string
		want       string
	}{
		{"same host", "api.example.test", "200 host=api.example.test"},
		{"another host", "other.example.test", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			before := len(s.requests())
			c := h.dial(t, netip.AddrPortFrom(netip.MustParseAddr("198.20.0.200"), 3128))
			resp, br, err := connect(c, "api.example.test:80")
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("CONNECT: %v %v", resp, err)
			}
			fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %s\r\n\r\nGET / HTTP/1.1\r\nHost: other.example.test\r\n\r\n", tt.host)
			bodies, _ := readResponses(t, bufConn{c, br})
			if tt.want == "" && len(bodies) != 0 || tt.want != "" && (len(bodies) != 1 || bodies[0] != tt.want) {
				t.Errorf("responses %q, want %q", bodies, tt.want)
			}
			want := 0
			if tt.want != "" {
				want = 1
			}
			if r := s.requests()[before:]; len(r) != want {
				t.Errorf("the server read %+v", r)
			}
		})
	}
}

// TestGatewayBareWord: a first line that is a bare word so far ("ping",
// or "GE") goes on once the client pauses, so that a raw client waiting
// for an answer gets one; but the bytes that would then complete an HTTP
// request line never go.
func TestGatewayBareWord(t *testing.T) {
	s := startServers(t)
	h := newHarness(t, harnessConfig{Routes: s.routes(), Gateway: GatewayConfig{HeaderTimeout: 100 * time.Millisecond}},
		MustParse("echo.example.test:7"), Policy{})
	h.lookup(t, "echo.example.test")
	exchange := func(c net.Conn, send string) (string, error) {
		if _, err := io.WriteString(c, send); err != nil {
			return "", err
		}
		c.SetReadDeadline(time.Now().Add(10 * time.Second)) // a hang fails the test; no outcome depends on it
		got := make([]byte, len(send))
		n, err := io.ReadFull(c, got)
		return string(got[:n]), err
	}
	t.Run("raw words", func(t *testing.T) {
		c := h.dial(t, netip.AddrPortFrom(echoAddr, 7))
		for _, w := range []string{"ping", "pong", "\x00binary", "and the rest"} {
			if got, err := exchange(c, w); got != w || err != nil {
				t.Fatalf("echo of %q: %q %v", w, got, err)
			}
		}
	})
	t.Run("a word longer than the gateway reads ahead", func(t *testing.T) {
		c := h.dial(t, netip.AddrPortFrom(echoAddr, 7))
		go io.WriteString(c, strings.Repeat("a", maxSniff+1))
		c.SetReadDeadline(time.Now().Add(10 * time.Second)) // a hang fails the test
		if _, err := io.ReadFull(c, make([]byte, maxSniff+1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("read: %v, want the connection reset", err)
		}
	})
	t.Run("a request line in pieces", func(t *testing.T) {
		c := h.dial(t, netip.AddrPortFrom(echoAddr, 7))
		if got, err := exchange(c, "GE"); got != "GE" || err != nil {
			t.Fatalf("echo of a bare word: %q %v", got, err)
		}
		if got, err := exchange(c, "T / HTTP/1.1\r\nHost: other.example.test\r\n\r\n"); err == nil || got != "" {
			t.Fatalf("the rest of a request line went through: %q %v", got, err)
		}
	})
}
