package netpolicy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/miekg/dns"
)

// ResolverConfig configures a Resolver.
type ResolverConfig struct {
	// Static maps names (tests, private services) to addresses; they are
	// answered without asking upstream, when the policy allows the name.
	Static map[string][]netip.Addr
	// Upstream is the host:port of the DNS server allowed names are forwarded
	// to; "" means none, and allowed names that are not static get SERVFAIL.
	Upstream string
	// TTL of static answers, in seconds; default 60.
	TTL uint32
	// Timeout for one upstream exchange; default 5s. An upstream that
	// never answers costs a sandbox's query its slot this long, then the
	// query gets SERVFAIL.
	Timeout time.Duration
	// MaxQueries bounds the DNS queries one sandbox has in flight at once;
	// a TCP connection to the resolver holds one while it is open (it
	// carries one query at a time). A UDP query past it is answered
	// REFUSED at once, from the loop that read it, and a TCP connection
	// past it is reset when accepted; both are counted as a denial with
	// ReasonDNSLimit. Default 128; negative: no bound.
	MaxQueries int
}

// Resolver is the node's DNS server for sandboxes. It answers a sandbox only
// for names its policy allows, and remembers in the Registry which addresses
// it gave which sandbox for which name, so that the Gateway can tell a real
// connection to an allowed name from a spoofed SNI or Host.
type Resolver struct {
	cfg    ResolverConfig
	static map[string][]netip.Addr // normalized names
	reg    *Registry
	log    *slog.Logger
}

// NewResolver returns a resolver; it starts nothing.
func NewResolver(cfg ResolverConfig, reg *Registry, log *slog.Logger) *Resolver {
	if cfg.TTL == 0 {
		cfg.TTL = 60
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Second
	}
	if cfg.MaxQueries == 0 {
		cfg.MaxQueries = 128
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	static := make(map[string][]netip.Addr, len(cfg.Static))
	for name, addrs := range cfg.Static {
		n := normName(name)
		for _, a := range addrs {
			static[n] = append(static[n], a.Unmap())
		}
	}
	return &Resolver{cfg: cfg, static: static, reg: reg, log: log}
}

// Serve answers DNS on pc (UDP) and l (TCP); either may be nil. It returns
// nil when ctx is done, or the error of a server that failed; either way
// after closing both and waiting for every query it admitted.
//
// Queries are admitted before a goroutine is started for them: UDP
// packets in the loop that reads them (the DNS server's reader, which
// hands no packet on), TCP connections as they are accepted, so a sandbox
// at its MaxQueries costs a read and a REFUSED, or an accept and a reset.
func (r *Resolver) Serve(ctx context.Context, pc net.PacketConn, l net.Listener) error {
	var (
		servers []*dns.Server
		queries sync.WaitGroup // UDP queries admitted
	)
	defer queries.Wait()
	if pc != nil {
		udp, ok := pc.(*net.UDPConn)
		if !ok {
			return fmt.Errorf("serve dns: a %T, want a *net.UDPConn", pc)
		}
		servers = append(servers, &dns.Server{PacketConn: udp, DecorateReader: func(rd dns.Reader) dns.Reader {
			return &udpAdmission{Reader: rd, r: r, ctx: ctx, queries: &queries}
		}})
	}
	if l != nil {
		servers = append(servers, &dns.Server{Listener: tcpAdmission{Listener: l, r: r}, ReadTimeout: 10 * time.Second})
	}
	if len(servers) == 0 {
		return errors.New("serve dns: no connection to serve on")
	}
	var wg sync.WaitGroup
	exited := make(chan error, len(servers))
	started := make([]chan struct{}, len(servers))
	done := make([]chan struct{}, len(servers))
	for i, srv := range servers {
		started[i], done[i] = make(chan struct{}), make(chan struct{})
		srv.Handler = dns.HandlerFunc(func(w dns.ResponseWriter, m *dns.Msg) { r.serveDNS(ctx, w, m) })
		srv.NotifyStartedFunc = func() { close(started[i]) }
		wg.Go(func() {
			defer close(done[i])
			exited <- srv.ActivateAndServe()
		})
	}

	var err error
	select {
	case <-ctx.Done():
	case err = <-exited:
		if err == nil {
			err = errors.New("stopped")
		}
		err = fmt.Errorf("serve dns: %w", err)
	}
	// Shut down on a context of its own: ctx may be done already.
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	for i, srv := range servers {
		// A server that never started (it failed first) has nothing to shut
		// down; one that started and failed shuts down at once.
		select {
		case <-started[i]:
			if e := srv.ShutdownContext(shutdownCtx); e != nil {
				r.log.Debug("dns shutdown", "err", e)
			}
		case <-done[i]:
		}
	}
	if pc != nil {
		pc.Close()
	}
	if l != nil {
		l.Close()
	}
	wg.Wait()
	return err
}

// udpAdmission is the UDP server's reader. It never hands a packet to the
// server: it admits each query itself and answers it on a goroutine of its
// own (counted in queries), or at once with REFUSED when the sandbox is at
// its MaxQueries. The server is left the reading, its socket options (the
// answer leaves from the address the query came to) and its shutdown.
type udpAdmission struct {
	dns.Reader
	r       *Resolver
	ctx     context.Context // Serve's lifecycle: bounds the answers
	queries *sync.WaitGroup
}

func (a *udpAdmission) ReadUDP(conn *net.UDPConn, timeout time.Duration) ([]byte, *dns.SessionUDP, error) {
	for {
		m, s, err := a.Reader.ReadUDP(conn, timeout)
		if err != nil {
			return nil, nil, err
		}
		a.r.admitUDP(a.ctx, a.queries, conn, m, s)
	}
}

// admitUDP admits one UDP query (see udpAdmission). A query from an
// address that is no sandbox's, or that does not parse, gets no answer.
func (r *Resolver) admitUDP(ctx context.Context, queries *sync.WaitGroup, conn *net.UDPConn, m []byte, s *dns.SessionUDP) {
	src := remoteAddr(s.RemoteAddr())
	req := new(dns.Msg)
	if err := req.Unpack(m); err != nil || req.Response {
		return
	}
	p, known, ok := r.reg.admit(src, slotQuery, r.cfg.MaxQueries)
	switch {
	case !known:
		r.log.Debug("dns query from unknown source dropped", "src", src)
		return
	case !ok:
		dest := "dns"
		if len(req.Question) == 1 {
			dest = normName(req.Question[0].Name)
		}
		r.reg.refuse(p.sb, dest, 53, ReasonDNSLimit)
		r.writeUDP(conn, s, new(dns.Msg).SetRcode(req, dns.RcodeRefused))
		return
	}
	queries.Go(func() {
		defer r.reg.release(p.sb, slotQuery)
		p.sock = Socket{Proto: "udp", Local: addrPort(s.RemoteAddr())}
		r.writeUDP(conn, s, r.answer(ctx, p, req, true))
	})
}

func (r *Resolver) writeUDP(conn *net.UDPConn, s *dns.SessionUDP, resp *dns.Msg) {
	b, err := resp.Pack()
	if err == nil {
		_, err = dns.WriteToSessionUDP(conn, b, s)
	}
	if err != nil {
		r.log.Debug("dns write", "err", err)
	}
}

// tcpAdmission is the TCP server's listener: a connection from an address
// that is no sandbox's is closed, one of a sandbox at its MaxQueries is
// reset, and the others hold one of the sandbox's query slots until they
// are closed.
type tcpAdmission struct {
	net.Listener
	r *Resolver
}

func (l tcpAdmission) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		src := remoteAddr(c.RemoteAddr())
		p, known, ok := l.r.reg.admit(src, slotQuery, l.r.cfg.MaxQueries)
		switch {
		case !known:
			l.r.log.Debug("dns connection from unknown source closed", "src", src)
			c.Close()
			continue
		case !ok:
			reset(c)
			l.r.reg.refuse(p.sb, "dns", 53, ReasonDNSLimit)
			continue
		}
		return &admittedConn{Conn: c, release: sync.OnceFunc(func() { l.r.reg.release(p.sb, slotQuery) })}, nil
	}
}

// admittedConn gives its sandbox's slot back when it is closed.
type admittedConn struct {
	net.Conn
	release func()
}

func (c *admittedConn) Close() error {
	c.release()
	return c.Conn.Close()
}

// serveDNS answers one query that came over TCP (UDP queries are answered
// by admitUDP). ctx is the Serve lifecycle, bounding upstream exchanges.
// A query from an address that is no sandbox's gets no answer at all, not
// even REFUSED: an answer goes to the source address the query claims, so
// answering would let whoever forges one reflect bytes of its choosing
// (the question is echoed) at any address.
func (r *Resolver) serveDNS(ctx context.Context, w dns.ResponseWriter, req *dns.Msg) {
	src := remoteAddr(w.RemoteAddr())
	p, ok := r.reg.peer(src)
	if !ok {
		r.log.Debug("dns query from unknown source dropped", "src", src)
		if w.RemoteAddr().Network() != "udp" {
			w.Close()
		}
		return
	}
	p.sock = Socket{Proto: w.RemoteAddr().Network(), Local: addrPort(w.RemoteAddr())}
	resp := r.answer(ctx, p, req, w.RemoteAddr().Network() == "udp")
	if err := w.WriteMsg(resp); err != nil {
		r.log.Debug("dns write", "err", err)
	}
}

func (r *Resolver) answer(ctx context.Context, p peer, req *dns.Msg, udp bool) *dns.Msg {
	resp := new(dns.Msg)
	if req.Opcode != dns.OpcodeQuery || len(req.Question) != 1 {
		return resp.SetRcode(req, dns.RcodeFormatError)
	}
	q := req.Question[0]
	name := normName(q.Name)
	if !p.policy.AllowsName(name, 0) {
		r.reg.lookupOwner(&p, p.sock)
		r.reg.observe(p, name, 53, Denied)
		r.log.Debug("dns denied", "sandbox", p.id, "name", name)
		return resp.SetRcode(req, dns.RcodeNameError)
	}
	if addrs, ok := r.static[name]; ok {
		resp.SetReply(req)
		resp.Authoritative = true
		var given []netip.Addr
		for _, a := range addrs {
			switch {
			case a.Is4() && (q.Qtype == dns.TypeA || q.Qtype == dns.TypeANY):
				resp.Answer = append(resp.Answer, &dns.A{
					Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: r.cfg.TTL},
					A:   a.AsSlice(),
				})
			case a.Is6() && (q.Qtype == dns.TypeAAAA || q.Qtype == dns.TypeANY):
				resp.Answer = append(resp.Answer, &dns.AAAA{
					Hdr:  dns.RR_Header{Name: q.Name, Rrtype: dns.TypeAAAA, Class: dns.ClassINET, Ttl: r.cfg.TTL},
					AAAA: a.AsSlice(),
				})
			default:
				continue
			}
			given = append(given, a)
		}
		r.reg.remember(p.sb, name, given)
		return resp
	}
	if r.cfg.Upstream == "" {
		return resp.SetRcode(req, dns.RcodeServerFailure)
	}
	up, err := r.exchange(ctx, req)
	if err != nil {
		r.log.Debug("dns upstream", "sandbox", p.id, "name", name, "err", err)
		return resp.SetRcode(req, dns.RcodeServerFailure)
	}
	up.Id = req.Id
	r.reg.remember(p.sb, name, addrsIn(up))
	if udp {
		size := dns.MinMsgSize
		if opt := req.IsEdns0(); opt != nil {
			size = max(size, int(opt.UDPSize()))
		}
		up.Truncate(size)
	}
	return up
}

// exchange forwards a query upstream over UDP, retrying over TCP when the
// answer is truncated.
func (r *Resolver) exchange(ctx context.Context, req *dns.Msg) (*dns.Msg, error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	m := req.Copy()
	m.Id = dns.Id()
	c := &dns.Client{Net: "udp", Timeout: r.cfg.Timeout}
	resp, _, err := c.ExchangeContext(ctx, m, r.cfg.Upstream)
	if err == nil && resp.Truncated {
		c.Net = "tcp"
		resp, _, err = c.ExchangeContext(ctx, m, r.cfg.Upstream)
	}
	if err != nil {
		return nil, fmt.Errorf("exchange with %s: %w", r.cfg.Upstream, err)
	}
	return resp, nil
}

// Static reports whether name → addr is one of the resolver's static
// names; the gateway trusts those (GatewayConfig.Trusted).
func (r *Resolver) Static(name string, addr netip.Addr) bool {
	return slices.Contains(r.static[normName(name)], addr.Unmap())
}

// Lookup returns the addresses of name, from the static names first, then
// upstream (A and AAAA). It applies no policy and remembers nothing; the
// Gateway uses it for CONNECT targets.
func (r *Resolver) Lookup(ctx context.Context, name string) ([]netip.Addr, error) {
	n := normName(name)
	if addrs, ok := r.static[n]; ok {
		return append([]netip.Addr(nil), addrs...), nil
	}
	if r.cfg.Upstream == "" {
		return nil, fmt.Errorf("look up %s: not a static name and no upstream", n)
	}
	var out []netip.Addr
	var errs []error
	for _, t := range []uint16{dns.TypeA, dns.TypeAAAA} {
		m := new(dns.Msg).SetQuestion(dns.Fqdn(n), t)
		resp, err := r.exchange(ctx, m)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if resp.Rcode != dns.RcodeSuccess {
			errs = append(errs, fmt.Errorf("%s %s: %s", n, dns.TypeToString[t], dns.RcodeToString[resp.Rcode]))
			continue
		}
		out = append(out, addrsIn(resp)...)
	}
	if len(out) == 0 {
		if len(errs) == 0 {
			errs = append(errs, errors.New("no addresses"))
		}
		return nil, fmt.Errorf("look up %s: %w", n, errors.Join(errs...))
	}
	return out, nil
}

// addrsIn returns the A and AAAA addresses in an answer, whatever their owner
// name: a CNAME chain ends at the name the question was about.
func addrsIn(m *dns.Msg) []netip.Addr {
	var out []netip.Addr
	for _, rr := range m.Answer {
		var ip net.IP
		switch rr := rr.(type) {
		case *dns.A:
			ip = rr.A
		case *dns.AAAA:
			ip = rr.AAAA
		default:
			continue
		}
		if a, ok := netip.AddrFromSlice(ip); ok {
			out = append(out, a.Unmap())
		}
	}
	return out
}

func remoteAddr(a net.Addr) netip.Addr {
	switch a := a.(type) {
	case *net.UDPAddr:
		return a.AddrPort().Addr().Unmap()
	case *net.TCPAddr:
		return a.AddrPort().Addr().Unmap()
	}
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}
