package netpolicy

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// testServers are the destinations, all on loopback.
type testServers struct {
	http   *httptest.Server
	tls    *httptest.Server
	echo   string
	banner string
	roots  *x509.CertPool

	mu   sync.Mutex
	seen []seenRequest // requests the HTTP and TLS servers read, in order
}

// seenRequest is what a test server read of one request.
type seenRequest struct {
	Host, Path, Connection, Upgrade string
	Body                            string
}

func (s *testServers) requests() []seenRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]seenRequest(nil), s.seen...)
}

// record notes each request (its body read whole) before handing it on.
func (s *testServers) record(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen := seenRequest{Host: r.Host, Path: r.URL.Path, Connection: strings.Join(r.Header.Values("Connection"), ","), Upgrade: r.Header.Get("Upgrade")}
		if r.URL.Path == "/echo-body" {
			b, _ := io.ReadAll(r.Body)
			seen.Body = string(b)
		}
		s.mu.Lock()
		s.seen = append(s.seen, seen)
		s.mu.Unlock()
		if r.URL.Path == "/echo-body" {
			io.WriteString(w, seen.Body)
			return
		}
		h.ServeHTTP(w, r)
	})
}

func (s *testServers) routes() map[netip.AddrPort]string {
	return map[netip.AddrPort]string{
		netip.AddrPortFrom(apiAddr, 80):     s.http.Listener.Addr().String(),
		netip.AddrPortFrom(tlsAddr, 443):    s.tls.Listener.Addr().String(),
		netip.AddrPortFrom(echoAddr, 7):     s.echo,
		netip.AddrPortFrom(bannerAddr, 25):  s.banner,
		netip.AddrPortFrom(bannerAddr, 587): s.banner,
		netip.AddrPortFrom(metaAddr, 80):    s.http.Listener.Addr().String(),
		netip.AddrPortFrom(privateAddr, 80): s.http.Listener.Addr().String(),
	}
}

func (s *testServers) httpLocal() netip.AddrPort {
	return netip.MustParseAddrPort(s.http.Listener.Addr().String())
}

// testHandler answers "host=<Host>"; /upload reads the body and answers its
// length; /download?n=N sends N bytes; /ws answers a WebSocket handshake
// with 101 and then echoes what it reads.
var testHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/upload":
		n, _ := io.Copy(io.Discard, r.Body)
		fmt.Fprintf(w, "%d", n)
	case "/download":
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		w.Header().Set("Content-Length", strconv.Itoa(n))
		io.CopyN(w, zeros{}, int64(n))
	case "/ws":
		if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
			fmt.Fprintf(w, "no upgrade")
			return
		}
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		io.Copy(c, brw)
	default:
		fmt.Fprintf(w, "host=%s", r.Host)
	}
})

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

func startServers(t *testing.T) *testServers {
	t.Helper()
	s := &testServers{}
	s.http = httptest.NewServer(s.record(testHandler))
	s.tls = httptest.NewTLSServer(s.record(testHandler))
	t.Cleanup(s.http.Close)
	t.Cleanup(s.tls.Close)
	s.roots = x509.NewCertPool()
	s.roots.AddCert(s.tls.Certificate())
	s.echo = serveTCP(t, func(c net.Conn) { io.Copy(c, c) })
	s.banner = serveTCP(t, func(c net.Conn) {
		io.WriteString(c, "220 hello\r\n")
		io.Copy(c, c)
	})
	return s
}

// serveTCP runs handle for each connection to a new loopback listener until
// the test ends.
func serveTCP(t *testing.T, handle func(net.Conn)) string {
	t.Helper()
	l := listen(t)
	var wg sync.WaitGroup
	var mu sync.Mutex
	conns := map[net.Conn]bool{}
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns[c] = true
			mu.Unlock()
			wg.Go(func() {
				defer c.Close()
				handle(c)
			})
		}
	})
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return l.Addr().String()
}

// httpGet sends a GET for path with Host host on c and reads the response.
func httpGet(c net.Conn, host, path string) (*http.Response, string, error) {
	if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: test\r\n\r\n", path, host); err != nil {
		return nil, "", err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp, strings.TrimSpace(string(body)), err
}

// tlsGet does a TLS handshake for sni on c, verifying against the test CA,
// then a GET.
func tlsGet(c net.Conn, sni string, roots *x509.CertPool) (*http.Response, string, error) {
	tc := tls.Client(c, &tls.Config{ServerName: sni, RootCAs: roots})
	if err := tc.Handshake(); err != nil {
		return nil, "", err
	}
	return httpGet(tc, sni, "/")
}

// connect sends a CONNECT for target and reads the proxy's response header.
func connect(c net.Conn, target string) (*http.Response, *bufio.Reader, error) {
	if _, err := fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target); err != nil {
		return nil, nil, err
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	return resp, br, err
}

// bufConn reads through a bufio.Reader that may hold bytes already.
type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (c bufConn) Read(p []byte) (int, error) { return c.r.Read(p) }
