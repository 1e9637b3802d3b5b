package netpolicy

import (
	"cmp"
	"context"
	"net"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
)

func TestResolver(t *testing.T) {
	tests := []struct {
		name      string
		allow     []string
		upstream  bool // run a fake upstream
		network   string
		src       string
		qname     string
		qtype     uint16
		wantRcode int
		wantAddrs []string // answers, also remembered for qname
		wantObs   bool     // a denied observation for qname:53
	}{
		{name: "allowed static", allow: []string{"api.example.test"}, qname: "api.example.test", qtype: dns.TypeA, wantRcode: dns.RcodeSuccess, wantAddrs: []string{"198.20.0.10"}},
		{name: "allowed static mixed case over tcp", allow: []string{"*.example.test:443"}, network: "tcp", qname: "API.Example.TEST", qtype: dns.TypeA, wantRcode: dns.RcodeSuccess, wantAddrs: []string{"198.20.0.10"}},
		{name: "static AAAA", allow: []string{"v6.example.test"}, qname: "v6.example.test", qtype: dns.TypeAAAA, wantRcode: dns.RcodeSuccess, wantAddrs: []string{"2001:db8::10"}},
		{name: "static no data", allow: []string{"v6.example.test"}, qname: "v6.example.test", qtype: dns.TypeA, wantRcode: dns.RcodeSuccess},
		{name: "denied name", allow: []string{"api.example.test"}, qname: "evil.example", qtype: dns.TypeA, wantRcode: dns.RcodeNameError, wantObs: true},
		{name: "denied static name", qname: "api.example.test", qtype: dns.TypeA, wantRcode: dns.RcodeNameError, wantObs: true},
		{name: "no upstream", allow: []string{"pypi.org"}, qname: "pypi.org", qtype: dns.TypeA, wantRcode: dns.RcodeServerFailure},
		{name: "upstream with cname", allow: []string{"pypi.org"}, upstream: true, qname: "pypi.org", qtype: dns.TypeA, wantRcode: dns.RcodeSuccess, wantAddrs: []string{"198.51.100.5"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var cfg harnessConfig
			if tt.upstream {
				cfg.Upstream = fakeUpstream(t)
			}
			h := newHarness(t, cfg, MustParse(tt.allow...), Policy{})
			network, src := cmp.Or(tt.network, "udp"), cmp.Or(tt.src, "127.0.0.1")
			resp := h.query(t, network, src, tt.qname, tt.qtype)
			if resp.Rcode != tt.wantRcode {
				t.Fatalf("rcode = %s, want %s", dns.RcodeToString[resp.Rcode], dns.RcodeToString[tt.wantRcode])
			}
			var got []string
			for _, a := range addrsIn(resp) {
				got = append(got, a.String())
			}
			if !slices.Equal(got, tt.wantAddrs) {
				t.Errorf("answers = %v, want %v", got, tt.wantAddrs)
			}
			p, _ := h.reg.peer(sandboxAddr)
			for _, a := range tt.wantAddrs {
				if !h.reg.gave(p.sb, netip.MustParseAddr(a), tt.qname) {
					t.Errorf("resolver did not remember %s for %s", a, tt.qname)
				}
			}
			obs := h.reg.Observations(sandboxID)
			if tt.wantObs {
				want := Observation{Destination: normName(tt.qname), Port: 53, Decision: Denied, Count: 1}
				if len(obs) != 1 || obs[0].Destination != want.Destination || obs[0].Port != 53 || obs[0].Decision != Denied || obs[0].Count != 1 || obs[0].FirstSeen.IsZero() {
					t.Errorf("observations = %+v, want %+v", obs, want)
				}
				if ev := h.deniedEvents(); len(ev) != 1 || ev[0].Destination != want.Destination {
					t.Errorf("denied events = %+v", ev)
				}
			} else if len(obs) != 0 {
				t.Errorf("unexpected observations %+v", obs)
			}
		})
	}
}

func TestResolverLookup(t *testing.T) {
	reg := NewRegistry(RegistryConfig{}, nil)
	r := NewResolver(ResolverConfig{Static: testStatic, Upstream: fakeUpstream(t)}, reg, nil)
	for _, tt := range []struct {
		name string
		want []string
	}{
		{"example.com", []string{"198.20.0.30"}},
		{"pypi.org.", []string{"198.51.100.5", "2001:db8::5"}},
	} {
		addrs, err := r.Lookup(t.Context(), tt.name)
		if err != nil {
			t.Fatalf("Lookup(%s): %v", tt.name, err)
		}
		var got []string
		for _, a := range addrs {
			got = append(got, a.String())
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("Lookup(%s) = %v, want %v", tt.name, got, tt.want)
		}
	}
	if _, err := r.Lookup(t.Context(), "nxdomain.test"); err == nil {
		t.Error("Lookup of a name upstream does not know succeeded")
	}
	if _, err := NewResolver(ResolverConfig{}, reg, nil).Lookup(t.Context(), "pypi.org"); err == nil {
		t.Error("Lookup without upstream succeeded")
	}
}

func TestResolverServeStops(t *testing.T) {
	reg := NewRegistry(RegistryConfig{}, nil)
	r := NewResolver(ResolverConfig{}, reg, nil)
	udp, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := listen(t)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- r.Serve(ctx, udp, l) }()
	time.Sleep(50 * time.Millisecond)
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve = %v, want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return")
	}
	if _, err := net.Dial("tcp", l.Addr().String()); err == nil {
		t.Error("TCP listener still open after Serve returned")
	}
	if _, err := udp.WriteTo([]byte("x"), udp.LocalAddr()); err == nil {
		t.Error("UDP conn still open after Serve returned")
	}
}

// fakeUpstream runs a DNS server on loopback that answers pypi.org with a
// CNAME to a CDN name and its addresses, and NXDOMAIN otherwise.
func fakeUpstream(t *testing.T) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, req *dns.Msg) {
		resp := new(dns.Msg).SetReply(req)
		q := req.Question[0]
		if q.Name != "pypi.org." {
			resp.Rcode = dns.RcodeNameError
			w.WriteMsg(resp)
			return
		}
		hdr := func(name string, t uint16) dns.RR_Header {
			return dns.RR_Header{Name: name, Rrtype: t, Class: dns.ClassINET, Ttl: 30}
		}
		resp.Answer = append(resp.Answer, &dns.CNAME{Hdr: hdr("pypi.org.", dns.TypeCNAME), Target: "cdn.fastly.test."})
		switch q.Qtype {
		case dns.TypeA:
			resp.Answer = append(resp.Answer, &dns.A{Hdr: hdr("cdn.fastly.test.", dns.TypeA), A: net.ParseIP("198.51.100.5")})
		case dns.TypeAAAA:
			resp.Answer = append(resp.Answer, &dns.AAAA{Hdr: hdr("cdn.fastly.test.", dns.TypeAAAA), AAAA: net.ParseIP("2001:db8::5")})
		}
		w.WriteMsg(resp)
	})}
	started := make(chan struct{})
	srv.NotifyStartedFunc = func() { close(started) }
	go srv.ActivateAndServe()
	<-started
	t.Cleanup(func() { srv.Shutdown() })
	return pc.LocalAddr().String()
}

// recorder is a dns.ResponseWriter that records what the resolver does.
type recorder struct {
	remote  net.Addr
	written []*dns.Msg
	closed  bool
}

func (w *recorder) LocalAddr() net.Addr       { return &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 53} }
func (w *recorder) RemoteAddr() net.Addr      { return w.remote }
func (w *recorder) WriteMsg(m *dns.Msg) error { w.written = append(w.written, m); return nil }
func (w *recorder) Write(b []byte) (int, error) {
	w.written = append(w.written, nil)
	return len(b), nil
}
func (w *recorder) Close() error        { w.closed = true; return nil }
func (w *recorder) TsigStatus() error   { return nil }
func (w *recorder) TsigTimersOnly(bool) {}
func (w *recorder) Hijack()             {}

// TestResolverUnknownSourceSilent: a query whose source address is no
// sandbox's gets no answer at all (an answer would go to whoever the
// source names: a reflection of chosen bytes), nor an observation; over
// TCP the connection is closed.
func TestResolverUnknownSourceSilent(t *testing.T) {
	var denied []string
	reg := NewRegistry(RegistryConfig{OnDenied: func(id string, d Denial) { denied = append(denied, id) }}, nil)
	reg.Add(sandboxID, sandboxAddr, Policy{}, Policy{})
	r := NewResolver(ResolverConfig{Static: testStatic}, reg, nil)
	q := new(dns.Msg).SetQuestion("api.example.test.", dns.TypeA)
	for _, tt := range []struct {
		name   string
		remote net.Addr
		answer bool
	}{
		{"udp from unknown", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 2), Port: 5353}, false},
		{"tcp from unknown", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2), Port: 5353}, false},
		{"udp from the sandbox", &net.UDPAddr{IP: sandboxAddr.AsSlice(), Port: 5353}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w := &recorder{remote: tt.remote}
			r.serveDNS(t.Context(), w, q)
			if got := len(w.written) > 0; got != tt.answer {
				t.Fatalf("answered = %v (%v), want %v", got, w.written, tt.answer)
			}
			if wantClosed := tt.remote.Network() == "tcp"; w.closed != wantClosed {
				t.Errorf("closed = %v, want %v", w.closed, wantClosed)
			}
		})
	}
	if len(denied) != 1 || denied[0] != sandboxID {
		t.Errorf("denied events = %v, want only the sandbox's own", denied)
	}
}

// TestResolverUDPUnknownSourceSilent: over UDP the reading loop admits
// queries itself; one whose source is no sandbox's gets no answer, nor
// does one that is itself an answer, while the sandbox's is answered.
// The loop's datagrams to a client leave in order, so a marker sent after
// the loop is done with a query comes first when the query got nothing.
func TestResolverUDPUnknownSourceSilent(t *testing.T) {
	reg := NewRegistry(RegistryConfig{}, nil)
	reg.Add(sandboxID, sandboxAddr, MustParse("api.example.test"), Policy{})
	r := NewResolver(ResolverConfig{Static: testStatic}, reg, nil)
	pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	query := new(dns.Msg).SetQuestion("api.example.test.", dns.TypeA)
	answer := new(dns.Msg).SetRcode(query, dns.RcodeSuccess)
	for _, tt := range []struct {
		name   string
		src    string
		msg    *dns.Msg
		answer bool
	}{
		{"from unknown", "127.0.0.2", query, false},
		{"an answer from the sandbox", "127.0.0.1", answer, false},
		{"from the sandbox", "127.0.0.1", query, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := net.DialUDP("udp", &net.UDPAddr{IP: net.ParseIP(tt.src)}, pc.LocalAddr().(*net.UDPAddr))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			b, _ := tt.msg.Pack()
			if _, err := c.Write(b); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 4096)
			n, s, err := dns.ReadFromSessionUDP(pc, buf)
			if err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			r.admitUDP(t.Context(), &wg, pc, buf[:n], s)
			wg.Wait()
			if _, err := dns.WriteToSessionUDP(pc, []byte("marker"), s); err != nil {
				t.Fatal(err)
			}
			c.SetReadDeadline(time.Now().Add(30 * time.Second)) // a guard, not a measure
			n, err = c.Read(buf)
			if err != nil {
				t.Fatal(err)
			}
			if got := string(buf[:n]) != "marker"; got != tt.answer {
				t.Errorf("answered = %v (%q), want %v", got, buf[:n], tt.answer)
			}
		})
	}
}
