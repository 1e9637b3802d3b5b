package netpolicy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// Public addresses the tests pretend to reach (the documentation ranges
// are special-purpose, so they will not do). They are never dialled: the
// harness's Dial maps them to loopback test servers and refuses any other
// address that is not loopback.
var (
	apiAddr    = netip.MustParseAddr("198.20.0.10") // api.example.test: HTTP
	tlsAddr    = netip.MustParseAddr("198.20.0.30") // example.com: TLS
	echoAddr   = netip.MustParseAddr("198.20.0.40") // echo.example.test: raw echo
	bannerAddr = netip.MustParseAddr("198.20.0.50") // mail.example.test: server speaks first
	otherAddr  = netip.MustParseAddr("198.20.0.99") // other.example.test: nothing there
	// private.example.test: a static name on a private address.
	privateAddr = netip.MustParseAddr("10.1.2.3")
	// metaAddr is the metadata address; the harness routes its port 80 to
	// the HTTP test server.
	metaAddr = netip.MustParseAddr("169.254.169.254")
)

var testStatic = map[string][]netip.Addr{
	"api.example.test":     {apiAddr},
	"example.com":          {tlsAddr},
	"echo.example.test":    {echoAddr},
	"mail.example.test":    {bannerAddr},
	"other.example.test":   {otherAddr},
	"local.example.test":   {netip.MustParseAddr("127.0.0.1")},
	"private.example.test": {privateAddr},
	"meta.example.test":    {metaAddr},
	"v6.example.test":      {netip.MustParseAddr("2001:db8::10")},
	"api.inject.test":      {injAPIAddr},
	"other.inject.test":    {injOtherAddr},
	"bad.inject.test":      {injBadAddr},
}

const sandboxID = "sb1"

var sandboxAddr = netip.MustParseAddr("127.0.0.1")

const gatewayListenAddr = "127.0.0.3:0"

type harnessConfig struct {
	Registry RegistryConfig
	Gateway  GatewayConfig
	Resolver ResolverConfig // Static and Upstream are the harness's
	Upstream string
	// DefaultDst, if valid, is the original destination of a connection
	// from the sandbox sb1 whose client registered none (floods dial
	// without registering); other sources still wait for theirs.
	DefaultDst netip.AddrPort
	// Routes maps pretend-public destinations to loopback addresses.
	Routes map[netip.AddrPort]string
}

// harness runs a registry, a resolver and a gateway on loopback; the sandbox
// sb1 connects from 127.0.0.1.
type harness struct {
	reg     *Registry
	res     *Resolver
	gw      *Gateway
	gwAddr  string
	dnsAddr string // UDP and TCP on the same port

	mu         sync.Mutex
	origDst    map[netip.AddrPort]netip.AddrPort // client address → original destination
	dialled    []string
	denied     []Observation
	suppressed int64
	defaultDst netip.AddrPort
}

func testLogger(t *testing.T) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

func newHarness(t *testing.T, cfg harnessConfig, policy, setup Policy) *harness {
	t.Helper()
	h := &harness{origDst: make(map[netip.AddrPort]netip.AddrPort), defaultDst: cfg.DefaultDst}
	log := testLogger(t)
	rc := cfg.Registry
	rc.OnDenied = func(id string, d Denial) {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.denied = append(h.denied, d.Observation)
		h.suppressed += d.Suppressed
	}
	h.reg = NewRegistry(rc, log)
	h.reg.Add(sandboxID, sandboxAddr, policy, setup)
	resCfg := cfg.Resolver
	resCfg.Static, resCfg.Upstream = testStatic, cfg.Upstream
	h.res = NewResolver(resCfg, h.reg, log)

	gc := cfg.Gateway
	gc.OriginalDst = h.originalDst
	gc.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		ap, err := netip.ParseAddrPort(addr)
		if err != nil {
			return nil, err
		}
		if to, ok := cfg.Routes[ap]; ok {
			addr = to
		} else if !ap.Addr().IsLoopback() {
			return nil, fmt.Errorf("test harness refuses to dial %s", addr)
		}
		h.mu.Lock()
		h.dialled = append(h.dialled, ap.String())
		h.mu.Unlock()
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}
	h.gw = NewGateway(gc, h.reg, h.res.Lookup, log)

	ctx, cancel := context.WithCancel(context.Background())
	// The gateway listens on another loopback address than the servers and
	// the sandbox: the address it is reached on is never a destination.
	l, err := net.Listen("tcp", gatewayListenAddr)
	if err != nil {
		t.Fatal(err)
	}
	h.gwAddr = l.Addr().String()
	udp, tcp := listenDNS(t)
	h.dnsAddr = udp.LocalAddr().String()
	errc := make(chan error, 2)
	go func() { errc <- h.gw.Serve(ctx, l) }()
	go func() { errc <- h.res.Serve(ctx, udp, tcp) }()
	t.Cleanup(func() {
		cancel()
		for range 2 {
			select {
			case err := <-errc:
				if err != nil {
					t.Errorf("Serve: %v", err)
				}
			case <-time.After(5 * time.Second):
				t.Error("Serve did not return after cancel")
				return
			}
		}
	})
	return h
}

// listenDNS listens on UDP and TCP on the same loopback port.
func listenDNS(t *testing.T) (net.PacketConn, net.Listener) {
	t.Helper()
	for range 20 {
		udp, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		tcp, err := net.Listen("tcp", udp.LocalAddr().String())
		if err == nil {
			return udp, tcp
		}
		udp.Close()
	}
	t.Fatal("no loopback port free for both UDP and TCP")
	return nil, nil
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// originalDst plays nftables: it returns the destination the test client
// registered for its address.
func (h *harness) originalDst(c net.Conn) (netip.AddrPort, error) {
	port := addrPort(c.RemoteAddr())
	if h.defaultDst.IsValid() && port.Addr() == sandboxAddr {
		h.mu.Lock()
		dst, ok := h.origDst[port]
		h.mu.Unlock()
		if !ok {
			dst = h.defaultDst
		}
		return dst, nil
	}
	for range 200 {
		h.mu.Lock()
		dst, ok := h.origDst[port]
		h.mu.Unlock()
		if ok {
			return dst, nil
		}
		time.Sleep(5 * time.Millisecond)
	}
	return netip.AddrPort{}, errors.New("test: no original destination registered")
}

// dial connects to the gateway from src as if to dst.
func (h *harness) dialFrom(t *testing.T, src string, dst netip.AddrPort) *net.TCPConn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	c, err := d.DialContext(t.Context(), "tcp", h.gwAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	h.mu.Lock()
	h.origDst[addrPort(c.LocalAddr())] = dst
	h.mu.Unlock()
	return c.(*net.TCPConn)
}

func (h *harness) dial(t *testing.T, dst netip.AddrPort) *net.TCPConn {
	t.Helper()
	return h.dialFrom(t, "127.0.0.1", dst)
}

// lookup asks the resolver for name's A records, as the sandbox would.
func (h *harness) lookup(t *testing.T, name string) *dns.Msg {
	t.Helper()
	return h.query(t, "udp", "127.0.0.1", name, dns.TypeA)
}

func (h *harness) query(t *testing.T, network, src, name string, qtype uint16) *dns.Msg {
	t.Helper()
	c := &dns.Client{Net: network, Timeout: 2 * time.Second}
	if network == "udp" {
		c.Dialer = &net.Dialer{LocalAddr: &net.UDPAddr{IP: net.ParseIP(src)}}
	} else {
		c.Dialer = &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	}
	m := new(dns.Msg).SetQuestion(dns.Fqdn(name), qtype)
	resp, _, err := c.ExchangeContext(t.Context(), m, h.dnsAddr)
	if err != nil {
		t.Fatalf("query %s: %v", name, err)
	}
	return resp
}

func (h *harness) dials() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.dialled...)
}

func (h *harness) deniedEvents() []Observation {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Observation(nil), h.denied...)
}

// observation waits for the sandbox's observation of dest:port and decision
// to satisfy ok (byte counts arrive when a connection ends).
func (h *harness) observation(t *testing.T, dest string, port int, decision string, ok func(Observation) bool) Observation {
	t.Helper()
	var last Observation
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		for _, o := range h.reg.Observations(sandboxID) {
			if o.Destination == dest && o.Port == port && o.Decision == decision {
				last = o
				if ok == nil || ok(o) {
					return o
				}
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no matching observation of %s:%d %s; last %+v; all %+v", dest, port, decision, last, h.reg.Observations(sandboxID))
	return last
}
