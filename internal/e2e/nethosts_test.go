package e2e

import (
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/e2e/e2etest"
)

// testHosts is a network namespace this test made, joined to the host by a
// veth pair, holding an HTTP server, a TLS server with its own CA, a raw
// TCP echo, a UDP sink and a fake metadata server on 169.254.169.254. Every
// address a network test dials is one of these.
type testHosts struct {
	host     *e2etest.TestHost
	Addr     string // the test hosts' address
	CAPEM    []byte
	MetaHits atomic.Int64 // requests the metadata server answered
	UDPHits  atomic.Int64 // datagrams the UDP sink received
	HTTPHits atomic.Int64
}

func startTestHosts(t *testing.T) *testHosts {
	t.Helper()
	e2etest.RequireRoot(t)
	// The host's route to the fake metadata server is one per machine.
	e2etest.HostLock(t, "metadata-route")
	host := e2etest.StartTestHost(t)
	h := &testHosts{host: host, Addr: host.Addr.String()}
	for _, args := range [][]string{
		{"-n", host.NS, "addr", "add", "169.254.169.254/32", "dev", "lo"},
		{"route", "add", "169.254.169.254/32", "via", h.Addr, "dev", host.Iface},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v %s", args, err, out)
		}
	}
	t.Cleanup(func() { exec.Command("ip", "route", "del", "169.254.169.254/32").Run() })

	cert, caPEM := e2etest.TestCert(t, "tls.test", "other.test", "web.test")
	h.CAPEM = caPEM
	web := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.HTTPHits.Add(1)
		if r.Method == http.MethodPost {
			n, _ := io.Copy(io.Discard, r.Body)
			fmt.Fprintf(w, "got %d", n)
			return
		}
		if n, err := strconv.Atoi(r.URL.Query().Get("bytes")); err == nil {
			w.Write(make([]byte, n))
			return
		}
		fmt.Fprintf(w, "hello from %s", r.Host)
	})
	meta := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.MetaHits.Add(1)
		io.WriteString(w, "secret-metadata")
	})
	h.serveHTTP(t, h.Addr+":80", web, nil)
	h.serveHTTP(t, h.Addr+":443", web, &tls.Config{Certificates: []tls.Certificate{cert}})
	h.serveHTTP(t, "169.254.169.254:80", meta, nil)
	echo := h.listen(t, "tcp", h.Addr+":7").(net.Listener)
	go func() { // ends when the listener closes at cleanup
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); io.Copy(c, c) }()
		}
	}()
	udp := h.listen(t, "udp", h.Addr+":9999").(net.PacketConn)
	go func() {
		buf := make([]byte, 2048)
		for {
			if _, _, err := udp.ReadFrom(buf); err != nil {
				return
			}
			h.UDPHits.Add(1)
		}
	}()
	return h
}

// listen makes a listener inside the test hosts' namespace.
func (h *testHosts) listen(t *testing.T, network, addr string) any {
	t.Helper()
	return h.host.Listen(t, network, addr)
}

func (h *testHosts) serveHTTP(t *testing.T, addr string, handler http.Handler, tc *tls.Config) {
	l := h.listen(t, "tcp", addr).(net.Listener)
	srv := &http.Server{Handler: handler, TLSConfig: tc, ReadHeaderTimeout: 5 * time.Second}
	var wg sync.WaitGroup
	wg.Go(func() {
		if tc != nil {
			srv.ServeTLS(l, "", "")
		} else {
			srv.Serve(l)
		}
	})
	t.Cleanup(func() { srv.Close(); wg.Wait() })
}
