package e2etest

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os/exec"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netns"
)

// TestHost is a host a test made for sandboxes to reach (or to fail to
// reach): a network namespace of its own, joined to the node by a veth
// pair, in 10.(200+RunOctet).N.0/24, so that no test traffic leaves the
// machine and no two test processes meet. Servers listen inside it with
// Listen and ServeHTTP.
type TestHost struct {
	NS       string     // the namespace's name (ip netns)
	Iface    string     // the node's side of the veth
	Addr     netip.Addr // the host's address, inside its namespace
	NodeSide netip.Addr // the address of the node's side of the veth
}

var testHosts atomic.Int64

// StartTestHost makes a test host; cleanup removes it.
func StartTestHost(t testing.TB) *TestHost {
	t.Helper()
	RequireRoot(t)
	n := testHosts.Add(1)
	prefix := fmt.Sprintf("10.%d.%d", 200+runOctet, n%250)
	h := &TestHost{
		NS:       fmt.Sprintf("cvth-%s-%d", runID, n),
		Iface:    fmt.Sprintf("cvth%s%d", runID[:6], n),
		Addr:     netip.MustParseAddr(prefix + ".2"),
		NodeSide: netip.MustParseAddr(prefix + ".1"),
	}
	peer := "cvtp" + h.Iface[4:]
	t.Cleanup(h.close)
	for _, args := range [][]string{
		{"netns", "add", h.NS},
		{"link", "add", h.Iface, "type", "veth", "peer", "name", peer},
		{"link", "set", peer, "netns", h.NS},
		{"addr", "add", h.NodeSide.String() + "/24", "dev", h.Iface},
		{"link", "set", h.Iface, "up"},
		{"-n", h.NS, "addr", "add", h.Addr.String() + "/24", "dev", peer},
		{"-n", h.NS, "link", "set", peer, "up"},
		{"-n", h.NS, "link", "set", "lo", "up"},
		{"-n", h.NS, "route", "add", "default", "via", h.NodeSide.String()},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v %s", args, err, out)
		}
	}
	return h
}

func (h *TestHost) close() {
	exec.Command("ip", "link", "del", h.Iface).Run()
	exec.Command("ip", "netns", "del", h.NS).Run()
}

// NSPath is the namespace's path, for setns.
func (h *TestHost) NSPath() string { return "/run/netns/" + h.NS }

// Listen listens inside the host's namespace ("tcp" gives a net.Listener,
// "udp" a net.PacketConn); the socket belongs to the namespace wherever it
// is served from. Cleanup closes it.
func (h *TestHost) Listen(t testing.TB, network, addr string) io.Closer {
	t.Helper()
	type result struct {
		c   io.Closer
		err error
	}
	rc := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // this thread ends inside the namespace: never unlocked
		ns, err := netns.GetFromName(h.NS)
		if err == nil {
			defer ns.Close()
			err = netns.Set(ns)
		}
		if err != nil {
			rc <- result{nil, err}
			return
		}
		if network == "udp" {
			pc, err := net.ListenPacket("udp4", addr)
			rc <- result{pc, err}
			return
		}
		l, err := net.Listen("tcp4", addr)
		rc <- result{l, err}
	}()
	r := <-rc
	if r.err != nil {
		t.Fatalf("listen %s in %s: %v", addr, h.NS, r.err)
	}
	t.Cleanup(func() { r.c.Close() })
	return r.c
}

// ServeHTTP serves handler on addr inside the host's namespace until the
// test ends.
func (h *TestHost) ServeHTTP(t testing.TB, addr string, handler http.Handler) {
	t.Helper()
	l := h.Listen(t, "tcp", addr).(net.Listener)
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 5 * time.Second}
	var wg sync.WaitGroup
	wg.Go(func() { srv.Serve(l) })
	t.Cleanup(func() { srv.Close(); wg.Wait() })
}
