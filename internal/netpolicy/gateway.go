package netpolicy

import (
	"cmp"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// GatewayConfig configures a Gateway. The zero value is usable on Linux.
type GatewayConfig struct {
	// SniffTimeout is how long the gateway waits for a client's first bytes
	// before deciding by address alone (server-speaks-first protocols).
	// Default 300ms.
	SniffTimeout time.Duration
	// HeaderTimeout bounds reading the rest of a TLS ClientHello or HTTP
	// request header once it has begun; a sandbox is one veth away, so its
	// header arrives at once. With SniffTimeout it bounds how long a
	// connection can wait for a decision. Default 1s.
	HeaderTimeout time.Duration
	// DialTimeout bounds resolving a CONNECT target and dialling a
	// destination. Default 10s.
	DialTimeout time.Duration
	// MaxConns bounds the connections one sandbox has open through the
	// gateway at once. A connection past it is reset as soon as it is
	// accepted, before anything is read or dialled, and counted as a
	// denial of its destination with ReasonConnectionLimit. Default 512;
	// negative: no bound.
	MaxConns int
	// HalfClosedIdle bounds how long a relayed connection lives once one
	// side has ended its half (sent FIN) while the other sends nothing: a
	// destination that never answers, or never closes, does not hold the
	// connection (and the sandbox's slot) for ever. Each byte the other
	// side sends starts it again. Default 1 minute (`cove serve
	// --gateway-half-close-timeout`).
	HalfClosedIdle time.Duration
	// Dial dials destinations; default a net.Dialer.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// OriginalDst returns where a redirected connection was going; default
	// getsockopt SO_ORIGINAL_DST (IPv4, Linux).
	OriginalDst func(c net.Conn) (netip.AddrPort, error)
	// Trusted reports whether the operator vouched for name → addr (a
	// static name of the resolver): such an address may be private, and a
	// policy that allows the name reaches it without a CIDR rule. Names from
	// upstream DNS never are: an upstream answer cannot point a sandbox at
	// the node's private network.
	Trusted func(name string, addr netip.Addr) bool
	// Local are the gateway's own addresses, never dialled whatever the
	// policy says. The address a connection arrived on (the host side of
	// the sandbox's veth) is always treated as one of them, and so are
	// loopback, 0.0.0.0/8 and the addresses IsNodeAddr reports.
	Local []netip.Addr
	// Refused are prefixes never dialled whatever the policy says: the
	// node's sandbox subnet (every sandbox and every host side of their
	// veths).
	Refused []netip.Prefix
	// IsNodeAddr reports whether a connection to addr would stay on this
	// node: an address of any of its interfaces, now. It is asked only for
	// destinations the policy allows, and must fail closed (true) when it
	// cannot tell. Default on Linux: a route lookup over netlink (the
	// kernel's local table holds every address of every interface, other
	// sandboxes' veths included, as it is at that moment); elsewhere, none.
	IsNodeAddr func(addr netip.Addr) bool
	// UpstreamRoots verify the destinations the gateway adds credentials
	// to (InjectRule): the host's trust store and the operator's CAs. Nil
	// is the host's trust store alone.
	UpstreamRoots *x509.CertPool
}

func (c *GatewayConfig) setDefaults() {
	if c.SniffTimeout <= 0 {
		c.SniffTimeout = 300 * time.Millisecond
	}
	if c.HeaderTimeout <= 0 {
		c.HeaderTimeout = time.Second
	}
	if c.DialTimeout <= 0 {
		c.DialTimeout = 10 * time.Second
	}
	if c.MaxConns == 0 {
		c.MaxConns = 512
	}
	if c.HalfClosedIdle <= 0 {
		c.HalfClosedIdle = time.Minute
	}
	if c.Dial == nil {
		c.Dial = (&net.Dialer{}).DialContext
	}
	if c.OriginalDst == nil {
		c.OriginalDst = originalDst
	}
	if c.IsNodeAddr == nil {
		c.IsNodeAddr = isNodeAddr
	}
}

// Gateway is the transparent TCP proxy every sandbox connection is redirected
// to. It learns the original destination, reads the TLS SNI, the HTTP Host or
// a CONNECT target, decides by the sandbox's policy and, if allowed, dials the
// destination itself and splices bytes.
type Gateway struct {
	cfg     GatewayConfig
	reg     *Registry
	resolve func(ctx context.Context, name string) ([]netip.Addr, error)
	log     *slog.Logger
}

// NewGateway returns a gateway; it starts nothing. resolve looks up CONNECT
// targets (Resolver.Lookup); nil refuses CONNECT to names.
func NewGateway(cfg GatewayConfig, reg *Registry, resolve func(ctx context.Context, name string) ([]netip.Addr, error), log *slog.Logger) *Gateway {
	cfg.setDefaults()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg.Local = slices.Clone(cfg.Local)
	for i, a := range cfg.Local {
		cfg.Local[i] = a.Unmap()
	}
	cfg.Refused = append(slices.Clone(cfg.Refused), never...)
	return &Gateway{cfg: cfg, reg: reg, resolve: resolve, log: log}
}

// Serve accepts connections on l until ctx is done, then closes l and every
// open connection and returns nil once all their goroutines have ended. It
// returns an error if l fails otherwise.
func (g *Gateway) Serve(ctx context.Context, l net.Listener) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	defer l.Close()
	stop := context.AfterFunc(ctx, func() { l.Close() })
	defer stop()
	var backoff time.Duration
	for {
		c, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, net.ErrClosed) {
				return fmt.Errorf("accept: %w", err)
			}
			// Out of descriptors and the like: wait, as net/http does.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			g.log.Warn("accept", "err", err, "retry_in", backoff)
			select {
			case <-time.After(backoff):
			case <-ctx.Done():
				return nil
			}
			continue
		}
		backoff = 0
		// Admission happens here, before a goroutine is started: a sandbox
		// at its bound costs the gateway nothing more than this.
		src := addrPort(c.RemoteAddr())
		p, known, ok := g.reg.admit(src.Addr(), slotConn, g.cfg.MaxConns)
		switch {
		case !known:
			g.log.Debug("connection from unknown source", "src", src)
			reset(c)
			continue
		case !ok:
			g.refuse(c, p)
			continue
		}
		wg.Go(func() {
			defer g.reg.release(p.sb, slotConn)
			// A connection lives no longer than its sandbox.
			cctx, cancel := context.WithCancel(ctx)
			defer cancel()
			defer context.AfterFunc(p.sb.life, cancel)()
			g.handle(cctx, c, p)
		})
	}
}

// refuse resets a connection of a sandbox at its MaxConns and counts it
// as a denial of its destination.
func (g *Gateway) refuse(c net.Conn, p peer) {
	dest, port := "unknown", 0
	if dst, err := g.cfg.OriginalDst(c); err == nil {
		dest, port = dst.Addr().Unmap().String(), int(dst.Port())
	}
	reset(c)
	g.reg.refuse(p.sb, dest, port, ReasonConnectionLimit)
}

// handle serves one connection of the sandbox p. ctx is the Serve
// lifecycle: when it is done the connection is closed.
func (g *Gateway) handle(ctx context.Context, c net.Conn, p peer) {
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	defer c.Close()

	log := g.log.With("sandbox", p.id)
	dst, err := g.cfg.OriginalDst(c)
	if err != nil {
		log.Warn("no original destination", "err", err)
		reset(c)
		return
	}
	dst = netip.AddrPortFrom(dst.Addr().Unmap(), dst.Port())
	g.reg.lookupOwner(&p, Socket{Proto: "tcp", Local: addrPort(c.RemoteAddr()), Remote: dst})
	s, err := sniff(c, g.cfg.SniffTimeout, g.cfg.HeaderTimeout)
	if err != nil {
		log.Debug("sniff", "dst", dst, "err", err)
		reset(c)
		return
	}
	if s.proto == protoHTTP && s.req.Method == http.MethodConnect {
		g.connect(ctx, c, p, s, log)
		return
	}
	if s.proto == protoBadHTTP && !wordOnly(s.buf) {
		g.reg.observe(p, dst.Addr().String(), int(dst.Port()), Denied)
		log.Debug("bad http", "dst", dst, "why", s.bad)
		writeStatus(c, http.StatusBadRequest, fmt.Sprintf("cove: %s; the network gateway forwards only HTTP requests it can check", s.bad))
		closeGently(c)
		return
	}

	v := g.decide(p, dst, s.name, c.LocalAddr())
	k := g.reg.observe(p, v.dest, int(dst.Port()), v.decision())
	if !v.allow {
		log.Debug("denied", "dst", dst, "dest", v.dest, "proto", s.proto, "why", v.why)
		g.deny(c, s.proto, v.message(p, dst))
		return
	}
	if s.proto == protoTLS && p.inject.covers(s.name, int(dst.Port())) {
		// Injected only at an address the sandbox's resolver gave for the
		// rule's host: a connection allowed by address (a CIDR rule) to
		// another one, whatever its server name, is spliced, and what the
		// sandbox sends there holds no value.
		if g.reg.gave(p.sb, dst.Addr(), s.name) {
			g.intercept(ctx, c, p, s, dst, k, log)
			return
		}
		log.Debug("inject: not an address given for the rule's host; spliced", "dst", dst, "dest", s.name)
	}
	up, err := g.dial(ctx, dst)
	if err != nil {
		log.Debug("dial", "dst", dst, "err", err)
		if s.proto == protoHTTP {
			writeStatus(c, http.StatusBadGateway, fmt.Sprintf("cove: cannot reach %s: %v", v.target(dst), err))
			closeGently(c)
		} else {
			reset(c)
		}
		return
	}
	switch {
	case s.proto == protoHTTP:
		g.forwardHTTP(ctx, c, up, s, p.sb, k)
	case s.proto == protoTLS, s.proto == protoRaw && len(s.buf) > 0:
		g.splice(ctx, c, up, s.buf, p.sb, k)
	default:
		// Decided by address before the client said what it wants (it
		// said nothing, or a bare word, in time): what it says still names
		// its destination.
		g.relayLate(ctx, c, up, s, p.sb, k, func(t sniffed) bool {
			if t.proto == protoBadHTTP {
				g.reg.observe(p, dst.Addr().String(), int(dst.Port()), Denied)
				return false
			}
			if t.name == "" {
				return true
			}
			lv := g.decide(p, dst, t.name, c.LocalAddr())
			if !lv.allow {
				g.reg.observe(p, lv.dest, int(dst.Port()), Denied)
				log.Debug("denied late", "dst", dst, "dest", lv.dest, "proto", t.proto, "why", lv.why)
			}
			return lv.allow
		})
	}
}

// connect serves an HTTP CONNECT request (a client that uses HTTPS_PROXY).
func (g *Gateway) connect(ctx context.Context, c net.Conn, p peer, s sniffed, log *slog.Logger) {
	target := s.req.Host
	if s.req.URL != nil && s.req.URL.Host != "" {
		target = s.req.URL.Host
	}
	host, portStr, err := net.SplitHostPort(target)
	port, perr := strconv.ParseUint(portStr, 10, 16)
	if err != nil || perr != nil || port == 0 {
		writeStatus(c, http.StatusBadRequest, fmt.Sprintf("cove: bad CONNECT target %q: want host:port", target))
		closeGently(c)
		return
	}

	var (
		v     verdict
		addrs []netip.Addr
	)
	if ip, err := netip.ParseAddr(host); err == nil {
		ip = ip.Unmap()
		v = g.decide(p, netip.AddrPortFrom(ip, uint16(port)), "", c.LocalAddr())
		addrs = []netip.Addr{ip}
	} else {
		name := hostName(host)
		v, addrs = g.decideConnect(ctx, p, name, int(port), c.LocalAddr())
		if v.why == whyUnresolved {
			log.Debug("connect: resolve", "target", target, "err", v.err)
			writeStatus(c, http.StatusBadGateway, fmt.Sprintf("cove: cannot resolve %s: %v", name, v.err))
			closeGently(c)
			return
		}
	}
	k := g.reg.observe(p, v.dest, int(port), v.decision())
	dst := netip.AddrPortFrom(netip.Addr{}, uint16(port))
	if len(addrs) > 0 {
		dst = netip.AddrPortFrom(addrs[0], uint16(port))
	}
	if !v.allow {
		log.Debug("denied", "connect", target, "why", v.why)
		writeStatus(c, http.StatusForbidden, v.message(p, dst))
		closeGently(c)
		return
	}
	var (
		up      net.Conn
		dialErr error
	)
	for _, a := range addrs {
		if up, dialErr = g.dial(ctx, netip.AddrPortFrom(a, uint16(port))); dialErr == nil {
			break
		}
	}
	if up == nil {
		log.Debug("connect: dial", "target", target, "err", dialErr)
		writeStatus(c, http.StatusBadGateway, fmt.Sprintf("cove: cannot reach %s: %v", target, dialErr))
		closeGently(c)
		return
	}
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		up.Close()
		return
	}
	// Bytes the client sent after the request header (an eager ClientHello)
	// belong to the tunnel. Plain HTTP in the tunnel must be for the host
	// the tunnel was allowed to.
	g.relayLate(ctx, c, up, sniffed{buf: s.buf[s.headerLen:]}, p.sb, k, func(t sniffed) bool {
		switch {
		case t.proto == protoBadHTTP:
			g.reg.observe(p, v.dest, int(port), Denied)
			return false
		case t.proto == protoHTTP && !sameHost(hostOnly(t.req.Host), host):
			g.reg.observe(p, cmp.Or(t.name, hostOnly(t.req.Host)), int(port), Denied)
			log.Debug("denied in tunnel", "connect", target, "host", t.req.Host)
			return false
		}
		return true
	})
}

// hostOnly drops the port of a Host value.
func hostOnly(h string) string {
	if host, _, err := net.SplitHostPort(h); err == nil {
		return host
	}
	return strings.Trim(h, "[]")
}

// decideConnect decides a CONNECT to a name: the name must be allowed at the
// port; the gateway then resolves it and keeps the addresses it may dial.
func (g *Gateway) decideConnect(ctx context.Context, p peer, name string, port int, local net.Addr) (verdict, []netip.Addr) {
	v := verdict{dest: name, name: name}
	if name == "" {
		v.why = whyNotAllowed
		return v, nil
	}
	if !p.policy.AllowsName(name, port) {
		v.why = whyNotAllowed
		return v, nil
	}
	if g.resolve == nil {
		v.why, v.err = whyUnresolved, errors.New("no resolver")
		return v, nil
	}
	rctx, cancel := context.WithTimeout(ctx, g.cfg.DialTimeout)
	defer cancel()
	all, err := g.resolve(rctx, name)
	if err != nil || len(all) == 0 {
		v.why, v.err = whyUnresolved, err
		if err == nil {
			v.err = errors.New("no addresses")
		}
		return v, nil
	}
	var ok []netip.Addr
	for _, a := range all {
		a = a.Unmap()
		if g.refused(a, local) {
			continue
		}
		if (p.policy.AllowsAddr(a, port) || !IsSpecial(a)) && !g.cfg.IsNodeAddr(a) {
			ok = append(ok, a)
		}
	}
	if len(ok) == 0 {
		v.why, v.addr = whySpecial, all[0].Unmap()
		if g.refused(v.addr, local) || !IsSpecial(v.addr) || p.policy.AllowsAddr(v.addr, port) {
			v.why = whyGateway
		}
		return v, []netip.Addr{v.addr}
	}
	// IPv4 first: the fence and most networks here are IPv4.
	slices.SortStableFunc(ok, func(a, b netip.Addr) int {
		if a.Is4() == b.Is4() {
			return 0
		}
		if a.Is4() {
			return -1
		}
		return 1
	})
	v.allow = true
	return v, ok
}

type why int

const (
	whyAllowed    why = iota
	whyNotAllowed     // no rule allows the name or address at that port
	whySpecial        // private, loopback, link-local…, and no CIDR rule names it
	whySpoofed        // the resolver did not give this address for that name
	whyGateway        // the node itself: the gateway, its host, its sandboxes
	whyUnresolved     // a CONNECT target that could not be resolved
)

func (w why) String() string {
	return [...]string{"allowed", "not allowed", "special address", "not resolved for name", "node itself", "unresolved"}[w]
}

// verdict is a decision about one destination.
type verdict struct {
	allow bool
	why   why
	dest  string     // the observation's destination: a name, else the address
	name  string     // the name asked for, if any
	addr  netip.Addr // the address, if known
	err   error      // whyUnresolved
}

func (v verdict) decision() string {
	if v.allow {
		return Allowed
	}
	return Denied
}

// decide decides a connection to dst, for the sniffed name ("" if none).
// local is the address the connection reached the gateway on.
func (g *Gateway) decide(p peer, dst netip.AddrPort, name string, local net.Addr) verdict {
	ip, port := dst.Addr(), int(dst.Port())
	v := verdict{dest: name, name: name, addr: ip}
	if name == "" {
		v.dest = ip.String()
	}
	switch {
	case g.refused(ip, local):
		v.why = whyGateway
	case p.policy.AllowsAddr(ip, port):
		v.allow = true
	case IsSpecial(ip) && !g.trusted(p, ip, name, port):
		v.why = whySpecial
	case name != "":
		switch {
		case !p.policy.AllowsName(name, port):
			v.why = whyNotAllowed
		case !g.reg.gave(p.sb, ip, name):
			v.why = whySpoofed
		default:
			v.allow = true
		}
	default:
		// No name: allowed if the resolver gave this address for a name the
		// policy allows at this port.
		v.why = whyNotAllowed
		for _, n := range g.reg.namesFor(p.sb, ip) {
			if p.policy.AllowsName(n, port) {
				v.allow, v.why, v.dest = true, whyAllowed, n
				break
			}
		}
	}
	// Last, as it asks the kernel: whatever the policy allows, never the
	// node itself.
	if v.allow && g.cfg.IsNodeAddr(ip) {
		v.allow, v.why = false, whyGateway
	}
	return v
}

// trusted reports whether a private address is reached through a static
// name: the sniffed one, or without one, a name the resolver gave the
// address for and the policy allows at this port.
func (g *Gateway) trusted(p peer, ip netip.Addr, name string, port int) bool {
	if g.cfg.Trusted == nil || IsMetadata(ip) {
		return false
	}
	if name != "" {
		return g.cfg.Trusted(name, ip)
	}
	for _, n := range g.reg.namesFor(p.sb, ip) {
		if p.policy.AllowsName(n, port) && g.cfg.Trusted(n, ip) {
			return true
		}
	}
	return false
}

// never are the prefixes no policy opens: this host's loopback and "this
// network" (0.0.0.0/8 reaches the host itself on Linux), and the
// unspecified IPv6 address.
var never = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("127.0.0.0/8"),
	netip.MustParsePrefix("::/128"),
	netip.MustParsePrefix("::1/128"),
}

// refused reports whether a is never a destination, by the gateway's
// configuration alone: a configured own address or refused prefix, or the
// address the connection reached the gateway on (with nftables redirect,
// the host side of the sandbox's veth, where host services listen too).
// The kernel's view (IsNodeAddr) comes on top, for allowed destinations.
func (g *Gateway) refused(a netip.Addr, local net.Addr) bool {
	a = a.Unmap()
	if a == addrPort(local).Addr() || slices.Contains(g.cfg.Local, a) {
		return true
	}
	for _, p := range g.cfg.Refused {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// target is "dest:port" for messages.
func (v verdict) target(dst netip.AddrPort) string {
	return net.JoinHostPort(v.dest, strconv.Itoa(int(dst.Port())))
}

// message is the one-line reason a denied client is told.
func (v verdict) message(p peer, dst netip.AddrPort) string {
	port := int(dst.Port())
	target := v.target(dst)
	addrEntry := ""
	if v.addr.IsValid() {
		addrEntry = withPort(netip.PrefixFrom(v.addr, v.addr.BitLen()).String(), uint16(port))
	}
	how := func(entry string) string {
		if p.setup {
			return fmt.Sprintf("allow it by adding %q to the sandbox's setup.network.allow", entry)
		}
		return fmt.Sprintf(`allow it with PATCH /v1/sandboxes/%s {"network":{"allow":[%q]}}`, p.id, entry)
	}
	policy := "this sandbox's network policy"
	if p.setup {
		policy = "this sandbox's setup network policy"
	}
	switch v.why {
	case whySpecial:
		what := target
		if v.name != "" {
			what = fmt.Sprintf("%s (%s)", target, v.addr)
		}
		if IsMetadata(v.addr) {
			return fmt.Sprintf("cove: %s is a cloud metadata address, reachable only through a rule naming that address exactly; %s", what, how(addrEntry))
		}
		return fmt.Sprintf("cove: %s is a private, loopback, link-local or other special-purpose address, reachable only through a CIDR rule; %s", what, how(addrEntry))
	case whySpoofed:
		return fmt.Sprintf("cove: %s: %s is not an address this sandbox's resolver gave for %s; resolve names through the sandbox's DNS, or %s", target, v.addr, v.name, how(addrEntry))
	case whyGateway:
		return fmt.Sprintf("cove: %s is this node itself (its network gateway, its host or its sandboxes) and is never a destination", net.JoinHostPort(dst.Addr().String(), strconv.Itoa(port)))
	}
	entry := v.name
	if entry == "" {
		entry = addrEntry
	}
	return fmt.Sprintf("cove: %s is not allowed by %s; %s", target, policy, how(entry))
}

// deny refuses a connection: plain HTTP gets a 403 with the reason, anything
// else a reset.
func (g *Gateway) deny(c net.Conn, proto protocol, msg string) {
	if proto != protoHTTP {
		reset(c)
		return
	}
	writeStatus(c, http.StatusForbidden, msg)
	closeGently(c)
}

func (g *Gateway) dial(ctx context.Context, dst netip.AddrPort) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, g.cfg.DialTimeout)
	defer cancel()
	return g.cfg.Dial(ctx, "tcp", dst.String())
}

// splice sends prefix (bytes already read from the client) to up, then
// copies both ways until both directions end, counting bytes into the
// observation k. ctx is the Serve lifecycle.
func (g *Gateway) splice(ctx context.Context, c, up net.Conn, prefix []byte, sb *sandbox, k obsKey) {
	stop := context.AfterFunc(ctx, func() { up.Close() })
	defer stop()
	defer up.Close()
	if len(prefix) > 0 {
		n, err := up.Write(prefix)
		g.reg.addBytes(sb, k, int64(n), 0)
		if err != nil {
			reset(c)
			return
		}
	}
	// Once either side has ended its half, the other must keep moving.
	l := &linger{idle: g.cfg.HalfClosedIdle}
	var wg sync.WaitGroup
	wg.Go(func() {
		if pipe(up, c, func(n int64) { g.reg.addBytes(sb, k, n, 0) }, l) {
			l.start(up)
		}
	})
	if pipe(c, up, func(n int64) { g.reg.addBytes(sb, k, 0, n) }, l) {
		l.start(c)
	}
	wg.Wait()
}

// linger is the idle bound of a relay one of whose sides has ended.
type linger struct {
	idle time.Duration
	on   atomic.Bool
}

// start bounds, from now on, how long src (the source of the direction
// still open) may stay silent.
func (l *linger) start(src net.Conn) {
	l.on.Store(true)
	src.SetReadDeadline(time.Now().Add(l.idle))
}

// pipe copies src to dst (through relay buffers: see copyOnce). At EOF it
// half-closes dst; on an error it closes both, which also ends the other
// direction. Once l is on (the other direction ended), it moves src's read
// deadline on by l's idle after each read it copies. It reports whether it
// ended at EOF with dst half-closed (the other direction goes on).
func pipe(dst, src net.Conn, count func(int64), l *linger) bool {
	for {
		n, err := copyOnce(dst, src, relayBuf)
		if n > 0 {
			count(n)
			if l != nil && l.on.Load() {
				src.SetReadDeadline(time.Now().Add(l.idle))
			}
		}
		if errors.Is(err, io.EOF) {
			if cw, ok := dst.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
				return true
			}
			dst.Close()
			return false
		}
		if err != nil {
			dst.Close()
			src.Close()
			return false
		}
	}
}

// writeStatus writes a one-response, plain-text HTTP reply.
func writeStatus(c net.Conn, code int, msg string) {
	body := msg + "\n"
	c.SetWriteDeadline(time.Now().Add(2 * time.Second))
	fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		code, http.StatusText(code), len(body), body)
}

// closeGently half-closes c and drains what the client still sends for a
// moment, so that the reply is not lost to a reset.
func closeGently(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
	c.SetReadDeadline(time.Now().Add(time.Second))
	io.Copy(io.Discard, io.LimitReader(c, 1<<20))
	c.Close()
}

// reset aborts a connection with a TCP RST.
func reset(c net.Conn) {
	if l, ok := c.(interface{ SetLinger(int) error }); ok {
		l.SetLinger(0)
	}
	c.Close()
}

func addrPort(a net.Addr) netip.AddrPort {
	var ap netip.AddrPort
	switch a := a.(type) {
	case *net.TCPAddr:
		ap = a.AddrPort()
	default:
		ap, _ = netip.ParseAddrPort(a.String())
	}
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}
