package fence

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
)

// TestGatewayNeverReachesNode: under `allow: ["0.0.0.0/0"]` a sandbox
// reaches a host outside, but never the node itself: not the host side of
// another sandbox's veth or of its own, not an address of another of the
// node's interfaces, not another sandbox, on the API's port or on a
// listener of the test's on every address of the node; nor, through
// CONNECT (the sandbox's own 127.0.0.1 is its own), the node's loopback.
// The gateway answers each with a 403 and dials nothing: the listener
// never accepts a connection.
func TestGatewayNeverReachesNode(t *testing.T) {
	host := e2etest.StartTestHost(t)
	host.ServeHTTP(t, host.Addr.String()+":80", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello from the test host")
	}))
	s := e2etest.StartServer(t)
	a := e2etest.Create(t, s.Admin, api.CreateSandboxRequest{Network: &api.NetworkPolicy{Allow: []string{"0.0.0.0/0"}}})
	b := e2etest.Create(t, s.Admin, api.CreateSandboxRequest{})
	la, lb := s.Link(t, a.ID), s.Link(t, b.ID)

	// A listener on every address of the node, that says so if reached.
	l, err := net.Listen("tcp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	var accepted atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Write([]byte("HTTP/1.0 200 OK\r\n\r\nreached the node\n"))
			c.Close()
		}
	})
	defer func() { l.Close(); wg.Wait() }()
	listener := fmt.Sprint(l.Addr().(*net.TCPAddr).Port)
	apiPort := s.URL[strings.LastIndex(s.URL, ":")+1:]

	get := func(addr netip.Addr, port string) string {
		t.Helper()
		res := e2etest.Sh(t, s.Admin, a.ID, fmt.Sprintf(`printf 'GET /healthz HTTP/1.0\r\nHost: x\r\n\r\n' | nc -w 5 %s %s`, addr, port), e2etest.WithTimeout(30))
		return res.Stdout + res.Stderr
	}
	// connect asks the gateway for a tunnel to addr:port (whatever address
	// the sandbox sends the CONNECT to, it is the gateway that answers).
	connect := func(addr netip.Addr, port string) string {
		t.Helper()
		target := net.JoinHostPort(addr.String(), port)
		res := e2etest.Sh(t, s.Admin, a.ID, fmt.Sprintf(`printf 'CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n' | nc -w 5 %s 80`, target, target, host.Addr), e2etest.WithTimeout(30))
		return res.Stdout + res.Stderr
	}
	// The policy does let the sandbox out: the refusals below are the
	// node's, not the policy's.
	if out := get(host.Addr, "80"); !strings.Contains(out, "hello from the test host") {
		t.Fatalf("under 0.0.0.0/0, the test host: %q", out)
	}
	for _, tt := range []struct {
		name string
		addr netip.Addr
		via  func(netip.Addr, string) string
	}{
		{"another sandbox's veth, host side", lb.HostAddr, get},
		{"its own veth, host side", la.HostAddr, get},
		{"another interface of the node", host.NodeSide, get},
		{"another sandbox", lb.SandboxAddr, get},
		{"CONNECT to loopback", netip.MustParseAddr("127.0.0.1"), connect},
		{"CONNECT to another sandbox's veth", lb.HostAddr, connect},
		{"CONNECT to another interface of the node", host.NodeSide, connect},
	} {
		for _, port := range []struct{ name, port string }{{"API port", apiPort}, {"a listener", listener}} {
			t.Run(tt.name+", "+port.name, func(t *testing.T) {
				out := tt.via(tt.addr, port.port)
				if !strings.Contains(out, "403 Forbidden") || !strings.Contains(out, "is this node itself") {
					t.Errorf("%s:%s: %q", tt.addr, port.port, out)
				}
			})
		}
	}
	// Every command has ended: a connection the gateway made would have
	// been accepted by now (the kernel completes it before the gateway
	// relays a byte).
	if n := accepted.Load(); n != 0 {
		t.Errorf("the node's listener accepted %d connections", n)
	}
}
