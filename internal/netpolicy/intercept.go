package netpolicy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http2"
)

// A connection of a sandbox whose TLS server name is the host of one of
// its injection rules (at the rule's port) is terminated by the gateway
// instead of spliced: it presents a leaf of the sandbox's own CA, reads
// each HTTP/1.1 request or HTTP/2 stream, checks that it is for that very
// host, adds the rule's header, replaces the placeholders of the secrets
// the rule names, and sends it on over its own TLS connection to the
// address the sandbox dialled, verified against the node's trust store
// and the operator's CAs. Every other connection is spliced, never
// decrypted.

// intercept serves one connection for injection. ctx is the connection's
// lifecycle.
func (g *Gateway) intercept(ctx context.Context, c net.Conn, p peer, s sniffed, dst netip.AddrPort, k obsKey, log *slog.Logger) {
	name := s.name
	port := int(dst.Port())
	cc := &countConn{Conn: c, prefix: s.buf, count: func(out, in int64) { g.reg.addBytes(p.sb, k, out, in) }}
	tc := tls.Server(cc, &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"h2", "http/1.1"},
		GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
			// The same bytes the policy decided on: the same name.
			if normName(hello.ServerName) != name || !p.inject.covers(name, port) {
				return nil, fmt.Errorf("no injection rule for %q", hello.ServerName)
			}
			return p.ca.leaf(name)
		},
	})
	c.SetDeadline(time.Now().Add(g.cfg.HeaderTimeout + g.cfg.SniffTimeout))
	if err := tc.HandshakeContext(ctx); err != nil {
		log.Debug("inject: handshake with the sandbox", "dest", name, "err", err)
		reset(c)
		return
	}
	c.SetDeadline(time.Time{})

	up := &upstream{g: g, dst: dst, name: name}
	tr := &http.Transport{
		DialTLSContext:        up.dialTLS,
		ForceAttemptHTTP2:     true,
		DisableCompression:    true,
		MaxIdleConnsPerHost:   2,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   g.cfg.DialTimeout,
		ExpectContinueTimeout: time.Second,
	}
	defer tr.CloseIdleConnections()
	h := &injector{g: g, p: p, name: name, port: port, k: k, tr: tr, up: up, log: log}

	l := &oneConn{c: tc, done: make(chan struct{})}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       g.cfg.HalfClosedIdle,
		ErrorLog:          slog.NewLogLogger(slog.DiscardHandler, slog.LevelDebug),
		BaseContext:       func(net.Listener) context.Context { return ctx },
		ConnState: func(_ net.Conn, st http.ConnState) {
			if st == http.StateClosed || st == http.StateHijacked {
				l.Close()
			}
		},
	}
	if err := http2.ConfigureServer(srv, &http2.Server{IdleTimeout: g.cfg.HalfClosedIdle}); err != nil {
		log.Error("inject: http2", "err", err)
		reset(c)
		return
	}
	var wg sync.WaitGroup
	wg.Go(func() { srv.Serve(l) })
	select {
	case <-l.done:
	case <-ctx.Done():
	}
	srv.Close()
	wg.Wait()
}

// oneConn is a listener that accepts one connection, then waits until it
// is closed.
type oneConn struct {
	mu   sync.Mutex
	c    net.Conn
	done chan struct{}
	once sync.Once
}

func (l *oneConn) Accept() (net.Conn, error) {
	l.mu.Lock()
	c := l.c
	l.c = nil
	l.mu.Unlock()
	if c != nil {
		return c, nil
	}
	<-l.done
	return nil, net.ErrClosed
}

func (l *oneConn) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *oneConn) Addr() net.Addr { return &net.TCPAddr{} }

// countConn is the sandbox's side of an intercepted connection: the bytes
// sniffed first are read again, and the bytes read and written counted.
type countConn struct {
	net.Conn
	prefix []byte
	count  func(out, in int64)
}

func (c *countConn) Read(b []byte) (int, error) {
	if len(c.prefix) > 0 {
		n := copy(b, c.prefix)
		c.prefix = c.prefix[n:]
		c.count(int64(n), 0)
		return n, nil
	}
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.count(int64(n), 0)
	}
	return n, err
}

func (c *countConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	if n > 0 {
		c.count(0, int64(n))
	}
	return n, err
}

// upstream dials the destination of an intercepted connection: the
// address the sandbox dialled (which the policy allowed for name), over
// TLS verified for name.
type upstream struct {
	g    *Gateway
	dst  netip.AddrPort
	name string
}

func (u *upstream) dialTLS(ctx context.Context, _, _ string) (net.Conn, error) {
	raw, err := u.g.dial(ctx, u.dst)
	if err != nil {
		return nil, err
	}
	tc := tls.Client(raw, &tls.Config{
		ServerName: u.name,
		RootCAs:    u.g.cfg.UpstreamRoots,
		NextProtos: []string{"h2", "http/1.1"},
		MinVersion: tls.VersionTLS12,
	})
	hctx, cancel := context.WithTimeout(ctx, u.g.cfg.DialTimeout)
	defer cancel()
	if err := tc.HandshakeContext(hctx); err != nil {
		raw.Close()
		return nil, err
	}
	return tc, nil
}

// injector serves the requests of one intercepted connection.
type injector struct {
	g    *Gateway
	p    peer
	name string
	port int
	k    obsKey
	tr   *http.Transport
	up   *upstream
	log  *slog.Logger
}

// hopHeaders are the headers of one hop, never passed on.
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

func (h *injector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	in := h.p.inject
	ev := InjectEvent{Rule: -1, Host: h.name, Destination: h.name, Port: h.port}
	if host, port := splitHost(r.Host, h.port); normName(host) != h.name || port != h.port {
		msg := fmt.Sprintf("cove: this connection was opened for %s (its TLS server name); a request for %q on it is refused", net.JoinHostPort(h.name, strconv.Itoa(h.port)), r.Host)
		h.fail(w, r, http.StatusForbidden, msg, ev, "host mismatch: the request named "+strconv.Quote(r.Host))
		return
	}
	if r.Method == http.MethodConnect || r.Header.Get("Upgrade") != "" {
		h.fail(w, r, http.StatusForbidden, "cove: CONNECT and protocol upgrades are refused on a connection the network gateway adds credentials to", ev, "connect or upgrade refused")
		return
	}
	out := r.Clone(r.Context())
	out.RequestURI = ""
	out.URL.Scheme = "https"
	out.URL.Host = net.JoinHostPort(h.name, strconv.Itoa(h.port))
	if h.port == 443 {
		out.URL.Host = h.name
	}
	out.Host = out.URL.Host
	if r.ContentLength == 0 {
		out.Body = nil
	}
	for _, k := range strings.Split(r.Header.Get("Connection"), ",") {
		if k = strings.TrimSpace(k); k != "" {
			out.Header.Del(k)
		}
	}
	for _, k := range hopHeaders {
		out.Header.Del(k)
	}
	if strings.Contains(strings.ToLower(strings.Join(r.Header.Values("Te"), ",")), "trailers") {
		out.Header.Set("Te", "trailers")
	}
	rules := in.matching(h.name, h.port, r.URL.Path)
	for _, i := range rules {
		rule := in.Rules[i]
		ev.Rule, ev.Header, ev.Secrets = i, rule.Header, rule.SecretNames()
		v, err := in.expand(rule)
		if err != nil {
			h.fail(w, r, http.StatusBadGateway, "cove: "+err.Error(), ev, err.Error())
			return
		}
		// Placeholders of the secrets this rule names, in headers only.
		for _, name := range ev.Secrets {
			ph, val := in.Placeholders[name], in.Secrets[name]
			if ph == "" {
				continue
			}
			for key, vals := range out.Header {
				for j, x := range vals {
					if strings.Contains(x, ph) {
						vals[j] = strings.ReplaceAll(x, ph, val)
					}
				}
				out.Header[key] = vals
			}
		}
		out.Header.Del(rule.Header)
		out.Header.Set(rule.Header, v)
	}
	resp, err := h.tr.RoundTrip(out)
	if err != nil {
		var cv *tls.CertificateVerificationError
		var hn x509.HostnameError
		var ua x509.UnknownAuthorityError
		var ci x509.CertificateInvalidError
		if errors.As(err, &cv) || errors.As(err, &hn) || errors.As(err, &ua) || errors.As(err, &ci) {
			reason := err.Error()
			if cv != nil {
				reason = cv.Err.Error()
			}
			msg := fmt.Sprintf("cove: the certificate of %s does not verify (%s); the request was not sent", h.name, reason)
			h.fail(w, r, http.StatusBadGateway, msg, ev, "upstream certificate: "+reason)
			return
		}
		if r.Context().Err() != nil {
			return
		}
		msg := fmt.Sprintf("cove: cannot reach %s: %v", net.JoinHostPort(h.name, strconv.Itoa(h.port)), err)
		h.fail(w, r, http.StatusBadGateway, msg, ev, "upstream: "+err.Error())
		return
	}
	defer resp.Body.Close()
	for _, k := range strings.Split(resp.Header.Get("Connection"), ",") {
		if k = strings.TrimSpace(k); k != "" {
			resp.Header.Del(k)
		}
	}
	for _, k := range hopHeaders {
		resp.Header.Del(k)
	}
	dstH := w.Header()
	for k, v := range resp.Header {
		dstH[k] = v
	}
	for k := range resp.Trailer {
		dstH.Add("Trailer", k)
	}
	if len(rules) > 0 {
		ev.Status = resp.StatusCode
		h.g.reg.injected(h.p.sb, h.k, ev, true)
	}
	w.WriteHeader(resp.StatusCode)
	rc := http.NewResponseController(w)
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			rc.Flush()
		}
		if err != nil {
			break
		}
	}
	for k, v := range resp.Trailer {
		dstH[k] = v
	}
}

// fail answers the sandbox with the gateway's own plain-text status and
// reports it, without sending anything upstream.
func (h *injector) fail(w http.ResponseWriter, r *http.Request, code int, msg string, ev InjectEvent, why string) {
	h.log.Debug("inject: refused", "dest", h.name, "status", code, "why", why)
	ev.Status, ev.Error = code, why
	h.g.reg.injected(h.p.sb, h.k, ev, false)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if r.ProtoMajor == 1 {
		w.Header().Set("Connection", "close")
	}
	w.WriteHeader(code)
	io.WriteString(w, msg+"\n")
}

// splitHost splits a Host value into a name and a port (def when none).
func splitHost(hostport string, def int) (string, int) {
	host, ps, err := net.SplitHostPort(hostport)
	if err != nil {
		return strings.Trim(hostport, "[]"), def
	}
	p, err := strconv.Atoi(ps)
	if err != nil {
		return host, -1
	}
	return host, p
}
