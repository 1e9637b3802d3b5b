package netpolicy

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// The floods below send 10,000 connections and 10,000 queries from the
// sandbox sb1 at a destination and an upstream resolver that never answer.
// What the node holds for them is counted, not timed: goroutines of this
// process (the gateway's and resolver's, with nothing else of the tests
// running meanwhile) and its open descriptors, each against a bound
// derived from the sandbox's limits.
const flood = 10000

// slack is what the counts may grow by for reasons of their own: the
// runtime, the test's client goroutines, a connection being closed as it
// is counted.
const slack = 16

// silentAddr:9 is a pretend-public destination whose server accepts and
// then neither reads nor writes nor closes.
var silentAddr = netip.MustParseAddr("198.20.0.60")

// sb2 is another sandbox on the same node, at 127.0.0.2.
const sb2 = "sb2"

var sb2Addr = netip.MustParseAddr("127.0.0.2")

// serveSilent accepts connections on a loopback listener and holds them,
// with one goroutine whatever their number; accepted counts them.
func serveSilent(t *testing.T) (addr string, accepted func() int) {
	t.Helper()
	l := listen(t)
	var (
		mu    sync.Mutex
		conns []net.Conn
		wg    sync.WaitGroup
	)
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	})
	t.Cleanup(func() {
		l.Close()
		wg.Wait()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	return l.Addr().String(), func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(conns)
	}
}

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	return len(ents)
}

// settle polls cond until it holds, failing the test with what() after a
// minute: the counts it waits for move as connections are closed, and on a
// machine shared by many a minute is no bound on how fast that must be.
func settle(t *testing.T, what func() string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("did not settle: %s", what())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// limitDenials sums a sandbox's observations denied for reason.
func limitDenials(reg *Registry, id, reason string) int64 {
	var n int64
	for _, o := range reg.Observations(id) {
		if o.Decision == Denied && o.Reason == reason {
			n += o.Count
		}
	}
	return n
}

// echoFromSB2 is the other sandbox at work: it resolves echo.example.test
// and has a line echoed through the gateway.
func echoFromSB2(t *testing.T, h *harness) {
	t.Helper()
	resp := h.query(t, "udp", sb2Addr.String(), "echo.example.test", dns.TypeA)
	if resp.Rcode != dns.RcodeSuccess || len(resp.Answer) != 1 {
		t.Fatalf("sb2's lookup during the flood: %v", resp)
	}
	c := h.dialFrom(t, sb2Addr.String(), netip.AddrPortFrom(echoAddr, 7))
	defer c.Close()
	if _, err := io.WriteString(c, "ping\n"); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(30 * time.Second)) // a guard, not a measure
	buf := make([]byte, 5)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping\n" {
		t.Fatalf("sb2's echo during the flood: %q %v", buf, err)
	}
}

// TestGatewayConnectionFlood: sb1 opens 10,000 connections to a server
// that never answers, and keeps them open. The gateway admits MaxConns of
// them; each of the rest is reset at once and counted as a
// connection_limit denial, and never dialled. The gateway's goroutines and
// descriptors stay within what MaxConns connections need, sb2 is served
// meanwhile, and once sb1 closes its side every relay ends (the silent
// server never closes: HalfClosedIdle ends them) and the counts are back
// where they started.
func TestGatewayConnectionFlood(t *testing.T) {
	if testing.Short() {
		t.Skip("a flood of 10,000 connections")
	}
	const maxConns = 64
	echo := startServers(t).echo
	silent, accepted := serveSilent(t)
	silentDst := netip.AddrPortFrom(silentAddr, 9)
	h := newHarness(t, harnessConfig{
		Gateway: GatewayConfig{MaxConns: maxConns, HalfClosedIdle: 100 * time.Millisecond},
		// One report per destination however long the flood takes.
		Registry:   RegistryConfig{DeniedEvery: time.Hour},
		Routes:     map[netip.AddrPort]string{silentDst: silent, netip.AddrPortFrom(echoAddr, 7): echo},
		DefaultDst: silentDst,
	}, MustParse("198.20.0.60/32:9"), Policy{})
	h.reg.Add(sb2, sb2Addr, MustParse("echo.example.test:7"), Policy{})

	echoFromSB2(t, h) // warm: whatever starts once has started
	baseG, baseFD := runtime.NumGoroutine(), openFDs(t)
	t.Logf("before: %d goroutines, %d descriptors", baseG, baseFD)

	conns := make([]net.Conn, flood)
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	}()
	var (
		wg         sync.WaitGroup
		mu         sync.Mutex
		errs       []error
		resetEarly int // connections reset before the client's connect returned
	)
	// Each connection has a source port of its own, outside the kernel's
	// ephemeral range: a port freed by a reset during the handshake, taken
	// again at once by the kernel for the next connect to the gateway, can
	// leave that connect's handshake stuck on loopback for minutes.
	var port atomic.Int32
	port.Store(int32(12000 + rand.IntN(8000)))
	dial := func() (net.Conn, error) {
		for {
			p := port.Add(1)
			if p >= 32000 {
				return nil, errors.New("out of source ports")
			}
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: sandboxAddr.AsSlice(), Port: int(p)}}
			c, err := d.DialContext(t.Context(), "tcp", h.gwAddr)
			if errors.Is(err, syscall.EADDRINUSE) {
				continue
			}
			return c, err
		}
	}
	const workers = 8
	for w := range workers {
		wg.Go(func() {
			for i := w; i < flood; i += workers {
				c, err := dial()
				if errors.Is(err, syscall.ECONNRESET) {
					// Refused so promptly that the reset came before
					// the client's connect returned.
					mu.Lock()
					resetEarly++
					mu.Unlock()
					continue
				}
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
				conns[i] = c
				c.Write([]byte{0}) // raw bytes: decided by address; a reset one may fail
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("dial the gateway: %v", errors.Join(errs...))
	}
	t.Logf("%d connections were reset before their connect returned", resetEarly)

	// Every connection is decided: MaxConns allowed and held, the rest
	// refused.
	state := func() string {
		c, q := h.reg.held(sandboxID)
		return fmt.Sprintf("sb1 holds %d connections, %d queries; %d refused; observations %+v; silent server accepted %d",
			c, q, limitDenials(h.reg, sandboxID, ReasonConnectionLimit), h.reg.Observations(sandboxID), accepted())
	}
	settle(t, state, func() bool {
		c, _ := h.reg.held(sandboxID)
		return c == maxConns && limitDenials(h.reg, sandboxID, ReasonConnectionLimit) == flood-maxConns && accepted() == maxConns
	})
	g, fds := runtime.NumGoroutine(), openFDs(t)
	clients := 0
	for _, c := range conns {
		if c != nil {
			clients++
		}
	}
	t.Logf("during: %d goroutines, %d descriptors (%d of them the test's clients, %d the silent server's)", g, fds, clients, maxConns)
	// A held connection is two goroutines (one per direction) and two
	// descriptors: the sandbox's and the destination's sockets (no splice
	// pipes: see relay.go). The silent server holds one more, and each
	// client its own.
	if max := baseG + 2*maxConns + slack; g > max {
		t.Errorf("during the flood %d goroutines, want at most %d (%d before, %d connections held)", g, max, baseG, maxConns)
	}
	if max := baseFD + clients + 3*maxConns + slack; fds > max {
		t.Errorf("during the flood %d descriptors, want at most %d", fds, max)
	}
	for _, o := range h.reg.Observations(sandboxID) {
		switch {
		case o.Destination != silentAddr.String() || o.Port != 9:
			t.Errorf("observation of another destination: %+v", o)
		case o.Decision == Allowed && o.Count != maxConns:
			t.Errorf("allowed %d, want %d", o.Count, maxConns)
		}
	}
	if got := len(h.dials()); got != 1+maxConns { // sb2's echo, then sb1's admitted
		t.Errorf("the gateway dialled %d times, want %d", got, 1+maxConns)
	}
	// One report for the one destination (DeniedEvery), its reason said.
	if ev := h.deniedEvents(); len(ev) != 1 || ev[0].Reason != ReasonConnectionLimit {
		t.Errorf("denied events = %+v, want one with reason %s", ev, ReasonConnectionLimit)
	}

	// sb2 is served while sb1 is at its bound, and sb1's next connection is
	// reset, not left waiting.
	echoFromSB2(t, h)
	if extra, err := (&net.Dialer{LocalAddr: &net.TCPAddr{IP: sandboxAddr.AsSlice()}}).DialContext(t.Context(), "tcp", h.gwAddr); err == nil {
		extra.SetReadDeadline(time.Now().Add(30 * time.Second)) // a guard, not a measure
		if _, err := extra.Read(make([]byte, 1)); !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, io.EOF) {
			t.Errorf("a connection over the bound: read = %v, want a reset", err)
		}
		extra.Close()
	} else if !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("a connection over the bound: dial = %v, want a reset", err)
	}

	// The flood stops: sb1 closes its side. The silent server does not.
	for i, c := range conns {
		if c != nil {
			c.Close()
			conns[i] = nil
		}
	}
	settle(t, func() string {
		return fmt.Sprintf("%s; %d goroutines (%d before), %d descriptors (%d before)", state(), runtime.NumGoroutine(), baseG, openFDs(t), baseFD)
	}, func() bool {
		c, _ := h.reg.held(sandboxID)
		// The silent server still holds what it accepted.
		return c == 0 && runtime.NumGoroutine() <= baseG+2 && openFDs(t) <= baseFD+maxConns+2
	})
	t.Logf("after: %d goroutines, %d descriptors (%d of them the silent server's)", runtime.NumGoroutine(), openFDs(t), maxConns)
	echoFromSB2(t, h)
}

// TestResolverQueryFlood: sb1 sends 10,000 UDP queries, at most a window
// of them unanswered at a time, for names the policy allows and an
// upstream resolver that never answers. MaxQueries of them are in flight
// at once; each of the rest gets REFUSED at once and is counted as a
// dns_limit denial; those in flight get SERVFAIL when the upstream
// exchange times out. Every query is answered, the resolver's goroutines
// and descriptors stay within what MaxQueries queries need, sb2 is
// answered meanwhile, and the counts are back where they started after.
// Over TCP, a connection past the bound is reset.
func TestResolverQueryFlood(t *testing.T) {
	if testing.Short() {
		t.Skip("a flood of 10,000 queries")
	}
	const maxQueries = 32
	upstream, err := net.ListenPacket("udp", "127.0.0.1:0") // never read
	if err != nil {
		t.Fatal(err)
	}
	defer upstream.Close()
	echo := startServers(t).echo
	h := newHarness(t, harnessConfig{
		Resolver: ResolverConfig{MaxQueries: maxQueries, Timeout: 200 * time.Millisecond},
		Upstream: upstream.LocalAddr().String(),
		Routes:   map[netip.AddrPort]string{netip.AddrPortFrom(echoAddr, 7): echo},
	}, MustParse("*.flood.test"), Policy{})
	h.reg.Add(sb2, sb2Addr, MustParse("echo.example.test:7"), Policy{})

	echoFromSB2(t, h)
	baseG, baseFD := runtime.NumGoroutine(), openFDs(t)
	t.Logf("before: %d goroutines, %d descriptors", baseG, baseFD)

	c, err := net.DialUDP("udp", &net.UDPAddr{IP: sandboxAddr.AsSlice()}, net.UDPAddrFromAddrPort(netip.MustParseAddrPort(h.dnsAddr)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const window = 2 * maxQueries
	var (
		mu       sync.Mutex
		answered = map[uint16]int{} // id → rcode
		slots    = make(chan struct{}, window)
		wg       sync.WaitGroup
	)
	wg.Go(func() {
		buf := make([]byte, 4096)
		for {
			n, err := c.Read(buf)
			if err != nil {
				return
			}
			m := new(dns.Msg)
			if m.Unpack(buf[:n]) != nil {
				continue
			}
			mu.Lock()
			if _, dup := answered[m.Id]; !dup {
				answered[m.Id] = m.Rcode
				<-slots
			}
			mu.Unlock()
		}
	})
	var peakG, peakFD, peakHeld int
	for i := range flood {
		select {
		case slots <- struct{}{}:
		case <-time.After(time.Minute): // a guard: a query went unanswered
			t.Fatalf("query %d: the window of %d did not open in a minute; answered %d", i, window, len(answered))
		}
		m := new(dns.Msg).SetQuestion(fmt.Sprintf("q%d.flood.test.", i), dns.TypeA)
		m.Id = uint16(i)
		b, _ := m.Pack()
		if _, err := c.Write(b); err != nil {
			t.Fatal(err)
		}
		if i%100 == 0 {
			_, q := h.reg.held(sandboxID)
			peakHeld = max(peakHeld, q)
			peakG = max(peakG, runtime.NumGoroutine())
			peakFD = max(peakFD, openFDs(t))
		}
		if i == flood/2 {
			if _, q := h.reg.held(sandboxID); q == 0 {
				t.Logf("mid-flood, sb1 had no query in flight")
			}
			echoFromSB2(t, h)
		}
	}
	settle(t, func() string {
		mu.Lock()
		defer mu.Unlock()
		return fmt.Sprintf("%d of %d answered", len(answered), flood)
	}, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(answered) == flood
	})
	c.Close()
	wg.Wait()
	// An answer is sent before its slot is given back.
	settle(t, func() string { _, q := h.reg.held(sandboxID); return fmt.Sprintf("%d queries held", q) },
		func() bool { _, q := h.reg.held(sandboxID); return q == 0 })

	rcodes := map[int]int{}
	for _, rc := range answered {
		rcodes[rc]++
	}
	t.Logf("answers: %d REFUSED, %d SERVFAIL; peaks: %d in flight, %d goroutines, %d descriptors", rcodes[dns.RcodeRefused], rcodes[dns.RcodeServerFailure], peakHeld, peakG, peakFD)
	if rcodes[dns.RcodeRefused]+rcodes[dns.RcodeServerFailure] != flood || rcodes[dns.RcodeRefused] == 0 || rcodes[dns.RcodeServerFailure] < maxQueries {
		t.Errorf("answers by rcode %v: want only REFUSED and SERVFAIL, at least %d SERVFAIL", rcodes, maxQueries)
	}
	if got := limitDenials(h.reg, sandboxID, ReasonDNSLimit); got != int64(rcodes[dns.RcodeRefused]) {
		t.Errorf("%d dns_limit denials observed, want one per REFUSED (%d)", got, rcodes[dns.RcodeRefused])
	}
	// A query in flight is a goroutine and the upstream exchange's socket;
	// while the exchange dials, net's connect has a goroutine watching its
	// context, and a query's goroutine gives its slot back just before it
	// ends: two goroutines a query bound them.
	if peakHeld > maxQueries {
		t.Errorf("%d queries in flight, want at most %d", peakHeld, maxQueries)
	}
	if max := baseG + 2*maxQueries + slack; peakG > max {
		t.Errorf("%d goroutines, want at most %d", peakG, max)
	}
	if max := baseFD + 1 + maxQueries + slack; peakFD > max {
		t.Errorf("%d descriptors, want at most %d", peakFD, max)
	}

	// Over TCP: each connection holds a slot while open; past the bound
	// one is reset.
	var tcp []net.Conn
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: sandboxAddr.AsSlice()}}
	for range maxQueries {
		tc, err := d.DialContext(t.Context(), "tcp", h.dnsAddr)
		if err != nil {
			t.Fatal(err)
		}
		tcp = append(tcp, tc)
	}
	settle(t, func() string { _, q := h.reg.held(sandboxID); return fmt.Sprintf("%d TCP slots held", q) },
		func() bool { _, q := h.reg.held(sandboxID); return q == maxQueries })
	if over, err := d.DialContext(t.Context(), "tcp", h.dnsAddr); err == nil {
		over.SetReadDeadline(time.Now().Add(30 * time.Second)) // a guard, not a measure
		if _, err := over.Read(make([]byte, 1)); !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, io.EOF) {
			t.Errorf("a TCP connection over the bound: read = %v, want a reset", err)
		}
		over.Close()
	} else if !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("a TCP connection over the bound: dial = %v, want a reset", err)
	}
	// sb2 over TCP is not held back by sb1's.
	if resp := h.query(t, "tcp", sb2Addr.String(), "echo.example.test", dns.TypeA); resp.Rcode != dns.RcodeSuccess {
		t.Errorf("sb2 over TCP while sb1 is at its bound: %v", resp)
	}
	for _, tc := range tcp {
		tc.Close()
	}

	settle(t, func() string {
		_, q := h.reg.held(sandboxID)
		return fmt.Sprintf("%d held; %d goroutines (%d before), %d descriptors (%d before)", q, runtime.NumGoroutine(), baseG, openFDs(t), baseFD)
	}, func() bool {
		_, q := h.reg.held(sandboxID)
		return q == 0 && runtime.NumGoroutine() <= baseG+2 && openFDs(t) <= baseFD+2
	})
	echoFromSB2(t, h)
}

// blackHole listens on loopback with an accept queue of one and fills it,
// so that a further connection's SYN is dropped: a dial to it never
// completes.
func blackHole(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
	filler, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { filler.Close() })
	return addr
}

// TestUpstreamNeverAnswers: work for a destination or an upstream
// resolver that never answers ends by its deadline, and the sandbox's
// slots come back: a dial whose SYN is dropped (DialTimeout: 502), a
// CONNECT to a name the upstream never resolves (502), a query forwarded
// to it (SERVFAIL).
func TestUpstreamNeverAnswers(t *testing.T) {
	upstream, err := net.ListenPacket("udp", "127.0.0.1:0") // never read
	if err != nil {
		t.Fatal(err)
	}
	defer upstream.Close()
	holeAddr := netip.MustParseAddr("198.20.0.70")
	h := newHarness(t, harnessConfig{
		Gateway:  GatewayConfig{DialTimeout: 300 * time.Millisecond},
		Resolver: ResolverConfig{Timeout: 100 * time.Millisecond},
		Upstream: upstream.LocalAddr().String(),
		Routes:   map[netip.AddrPort]string{netip.AddrPortFrom(holeAddr, 80): blackHole(t)},
	}, MustParse("198.20.0.70/32:80", "*.never.test"), Policy{})

	c := h.dial(t, netip.AddrPortFrom(holeAddr, 80))
	c.SetDeadline(time.Now().Add(30 * time.Second)) // a guard, not a measure
	resp, body, err := httpGet(c, "198.20.0.70", "/")
	if err != nil || resp.StatusCode != 502 {
		t.Errorf("a destination that never answers the SYN: %v %q %v, want 502", resp, body, err)
	}

	c = h.dial(t, netip.AddrPortFrom(netip.MustParseAddr("198.20.0.80"), 3128))
	c.SetDeadline(time.Now().Add(30 * time.Second))
	resp, _, err = connect(c, "www.never.test:443")
	if err != nil || resp.StatusCode != 502 {
		t.Errorf("CONNECT to a name the upstream never resolves: %v %v, want 502", resp, err)
	}

	if m := h.lookup(t, "www.never.test"); m.Rcode != dns.RcodeServerFailure {
		t.Errorf("a query the upstream never answers: %v, want SERVFAIL", m)
	}
	settle(t, func() string { c, q := h.reg.held(sandboxID); return fmt.Sprintf("held %d, %d", c, q) },
		func() bool { c, q := h.reg.held(sandboxID); return c == 0 && q == 0 })
}

// TestHalfClosedRelaysEnd: a client that ends its half of a connection to
// a server that never answers nor closes does not hold the connection, or
// its sandbox's slot: the relay ends once the server has been silent for
// HalfClosedIdle, whichever way the connection was relayed. Before the
// client ends, the relay waits as long as it takes.
func TestHalfClosedRelaysEnd(t *testing.T) {
	silent, accepted := serveSilent(t)
	h := newHarness(t, harnessConfig{
		Gateway: GatewayConfig{HalfClosedIdle: 100 * time.Millisecond},
		Routes: map[netip.AddrPort]string{
			netip.AddrPortFrom(silentAddr, 80): silent,
			netip.AddrPortFrom(silentAddr, 9):  silent,
		},
	}, MustParse("198.20.0.60/32"), Policy{})
	for _, tt := range []struct {
		name string
		port uint16
		send string // "" sends nothing: decided by address, relayed late
	}{
		{"spliced", 9, "\x00raw"},
		{"plain HTTP", 80, "GET / HTTP/1.1\r\nHost: 198.20.0.60\r\n\r\n"},
		{"silent, then relayed late", 9, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			before := accepted()
			c := h.dial(t, netip.AddrPortFrom(silentAddr, tt.port))
			if tt.send != "" {
				io.WriteString(c, tt.send)
			}
			// The connection is relayed before the client ends its half.
			settle(t, func() string { return fmt.Sprintf("the silent server accepted %d", accepted()) },
				func() bool { return accepted() == before+1 })
			if conns, _ := h.reg.held(sandboxID); conns != 1 {
				t.Fatalf("sb1 holds %d connections, want 1", conns)
			}
			c.CloseWrite()
			c.SetReadDeadline(time.Now().Add(30 * time.Second)) // a guard, not a measure
			if _, err := io.Copy(io.Discard, c); err != nil && !errors.Is(err, syscall.ECONNRESET) {
				t.Errorf("the client's read: %v, want the end of the connection", err)
			}
			settle(t, func() string {
				conns, _ := h.reg.held(sandboxID)
				return fmt.Sprintf("sb1 holds %d connections", conns)
			},
				func() bool { conns, _ := h.reg.held(sandboxID); return conns == 0 })
		})
	}
}

// TestResetRelaysEnd: a client that resets its connection to a server
// that never answers nor closes ends the relay at once, however long
// HalfClosedIdle is: a reset is not an end of the client's half, after
// which the server would be waited for.
func TestResetRelaysEnd(t *testing.T) {
	silent, accepted := serveSilent(t)
	h := newHarness(t, harnessConfig{
		Gateway: GatewayConfig{HalfClosedIdle: time.Hour},
		Routes: map[netip.AddrPort]string{
			netip.AddrPortFrom(silentAddr, 80): silent,
			netip.AddrPortFrom(silentAddr, 9):  silent,
		},
	}, MustParse("198.20.0.60/32"), Policy{})
	for _, tt := range []struct {
		name string
		port uint16
		send string // "" sends nothing: decided by address, relayed late
	}{
		{"spliced", 9, "\x00raw"},
		{"plain HTTP", 80, "GET / HTTP/1.1\r\nHost: 198.20.0.60\r\n\r\n"},
		{"silent, then relayed late", 9, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			before := accepted()
			c := h.dial(t, netip.AddrPortFrom(silentAddr, tt.port))
			if tt.send != "" {
				io.WriteString(c, tt.send)
			}
			settle(t, func() string { return fmt.Sprintf("the silent server accepted %d", accepted()) },
				func() bool { return accepted() == before+1 })
			c.SetLinger(0)
			c.Close()
			settle(t, func() string {
				conns, _ := h.reg.held(sandboxID)
				return fmt.Sprintf("sb1 holds %d connections", conns)
			},
				func() bool { conns, _ := h.reg.held(sandboxID); return conns == 0 })
		})
	}
}

// TestRemoveEndsRelays: a sandbox removed (its network going away) takes
// its connections through the gateway with it, even to a server that
// never reads nor closes, and whose relay neither side has ended.
func TestRemoveEndsRelays(t *testing.T) {
	silent, accepted := serveSilent(t)
	h := newHarness(t, harnessConfig{
		Gateway: GatewayConfig{HalfClosedIdle: time.Hour},
		Routes:  map[netip.AddrPort]string{netip.AddrPortFrom(silentAddr, 9): silent},
	}, MustParse("198.20.0.60/32"), Policy{})
	c := h.dial(t, netip.AddrPortFrom(silentAddr, 9))
	io.WriteString(c, "\x00raw")
	settle(t, func() string { return fmt.Sprintf("the silent server accepted %d", accepted()) },
		func() bool { return accepted() == 1 })
	h.reg.Remove(sandboxID)
	c.SetReadDeadline(time.Now().Add(30 * time.Second)) // a guard, not a measure
	if _, err := io.Copy(io.Discard, c); err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("the client's read after Remove: %v, want the end of the connection", err)
	}
}
