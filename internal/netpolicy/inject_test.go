package netpolicy

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"
)

// Pretend-public destinations of the injection tests (testStatic names
// them), each served by a loopback TLS server.
var (
	injAPIAddr   = netip.MustParseAddr("198.20.1.10") // api.inject.test: has a rule
	injOtherAddr = netip.MustParseAddr("198.20.1.20") // other.inject.test: allowed, no rule
	injBadAddr   = netip.MustParseAddr("198.20.1.30") // bad.inject.test: has a rule, cert from an unknown CA
)

const (
	injSecret      = "s3cr3t-value-7f1c0ad2"
	injPlaceholder = "cove_ph_0123456789abcdef0123456789abcdef"
)

// testCA is a CA a test makes for its TLS hosts.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newTestCA(t testing.TB) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "inject test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool}
}

func (ca *testCA) leaf(t testing.TB, names ...string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: names[0]}, DNSNames: names,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// injHost is a TLS test host recording what it receives.
type injHost struct {
	srv *httptest.Server
	mu  sync.Mutex
	got []*http.Request
}

func (h *injHost) requests() []*http.Request {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]*http.Request(nil), h.got...)
}

func startInjHost(t testing.TB, cert tls.Certificate, handler http.HandlerFunc) *injHost {
	t.Helper()
	h := &injHost{}
	h.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		h.got = append(h.got, r)
		h.mu.Unlock()
		if handler != nil {
			handler(w, r)
			return
		}
		fmt.Fprintf(w, "proto=%s auth=%s key=%s", r.Proto, r.Header.Get("Authorization"), r.Header.Get("X-Key"))
	}))
	h.srv.EnableHTTP2 = true
	h.srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	h.srv.StartTLS()
	t.Cleanup(h.srv.Close)
	return h
}

type injEnv struct {
	h               *harness
	ca              *testCA
	api, other, bad *injHost
	sandboxCA       *SandboxCA
	events          func() []InjectEvent
	sandboxRoots    *x509.CertPool // the sandbox's bundle: test CA + its gateway CA
}

func newInjEnv(t *testing.T, rules []InjectRule) *injEnv {
	t.Helper()
	e := &injEnv{ca: newTestCA(t)}
	wrong := newTestCA(t)
	e.api = startInjHost(t, e.ca.leaf(t, "api.inject.test"), nil)
	e.other = startInjHost(t, e.ca.leaf(t, "other.inject.test"), nil)
	e.bad = startInjHost(t, wrong.leaf(t, "bad.inject.test"), nil)
	var (
		mu     sync.Mutex
		events []InjectEvent
	)
	e.events = func() []InjectEvent {
		mu.Lock()
		defer mu.Unlock()
		return append([]InjectEvent(nil), events...)
	}
	cfg := harnessConfig{
		Routes: map[netip.AddrPort]string{
			netip.AddrPortFrom(injAPIAddr, 443):   e.api.srv.Listener.Addr().String(),
			netip.AddrPortFrom(injOtherAddr, 443): e.other.srv.Listener.Addr().String(),
			netip.AddrPortFrom(injBadAddr, 443):   e.bad.srv.Listener.Addr().String(),
		},
		Registry: RegistryConfig{OnInjected: func(id string, ev InjectEvent) {
			mu.Lock()
			defer mu.Unlock()
			events = append(events, ev)
		}},
		Gateway: GatewayConfig{UpstreamRoots: e.ca.pool},
	}
	e.h = newHarness(t, cfg, MustParse("api.inject.test", "other.inject.test", "bad.inject.test"), Policy{})
	ca, err := NewSandboxCA(sandboxID, nil)
	if err != nil {
		t.Fatal(err)
	}
	e.sandboxCA = ca
	checked, err := CheckInject(rules)
	if err != nil {
		t.Fatal(err)
	}
	e.h.reg.SetInjection(sandboxID, &Injection{
		Rules:        checked,
		Secrets:      map[string]string{"openai": injSecret},
		Placeholders: map[string]string{"openai": injPlaceholder},
	}, ca)
	for _, n := range []string{"api.inject.test", "other.inject.test", "bad.inject.test"} {
		e.h.lookup(t, n)
	}
	e.sandboxRoots = x509.NewCertPool()
	e.sandboxRoots.AddCert(e.ca.cert)
	e.sandboxRoots.AddCert(ca.Certificate())
	return e
}

var addrOf = map[string]netip.Addr{
	"api.inject.test":   injAPIAddr,
	"other.inject.test": injOtherAddr,
	"bad.inject.test":   injBadAddr,
}

// client is an HTTP client in the sandbox: each connection goes to the
// gateway as if to the address of its host, and trusts roots.
func (e *injEnv) client(t *testing.T, h2 bool, roots *x509.CertPool) *http.Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			host, _, _ := net.SplitHostPort(addr)
			return e.h.dial(t, netip.AddrPortFrom(addrOf[host], 443)), nil
		},
		TLSClientConfig:   &tls.Config{RootCAs: roots},
		ForceAttemptHTTP2: h2,
	}
	if !h2 {
		tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func get(t *testing.T, c *http.Client, url string, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

var openaiRule = InjectRule{Host: "api.inject.test", Header: "Authorization", Value: "Bearer {secret:openai}"}

func TestInjectAddsHeaderHTTP1AndHTTP2(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		t.Run(fmt.Sprintf("h2=%v", h2), func(t *testing.T) {
			e := newInjEnv(t, []InjectRule{openaiRule})
			c := e.client(t, h2, e.sandboxRoots)
			resp, body := get(t, c, "https://api.inject.test/v1/models", map[string]string{
				"Authorization": "Bearer " + injPlaceholder, "X-Key": "key " + injPlaceholder,
			})
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			wantProto := "HTTP/1.1"
			if h2 {
				wantProto = "HTTP/2.0"
			}
			// Upstream, the gateway speaks what the host offers (HTTP/2 here).
			if want := "proto=HTTP/2.0 auth=Bearer " + injSecret + " key=key " + injSecret; body != want {
				t.Fatalf("the host saw %q, want %q", body, want)
			}
			if resp.Proto != wantProto {
				t.Errorf("sandbox spoke %s to the gateway, want %s", resp.Proto, wantProto)
			}
			// The sandbox was answered by a leaf of its own CA for the host.
			if cs := resp.TLS; cs == nil || cs.PeerCertificates[0].Issuer.CommonName != e.sandboxCA.Certificate().Subject.CommonName {
				t.Fatalf("not terminated with the sandbox's CA: %+v", resp.TLS)
			}
			o := e.h.observation(t, "api.inject.test", 443, Allowed, func(o Observation) bool { return o.Injected == 1 })
			if o.LastStatus != 200 {
				t.Errorf("last status %d", o.LastStatus)
			}
			// A second request: counted, not reported again within the minute.
			get(t, c, "https://api.inject.test/v1/models", nil)
			e.h.observation(t, "api.inject.test", 443, Allowed, func(o Observation) bool { return o.Injected == 2 })
			evs := e.events()
			if len(evs) != 1 || evs[0].Status != 200 || evs[0].Rule != 0 || evs[0].Error != "" {
				t.Fatalf("events %+v, want one of status 200", evs)
			}
			assertNoValue(t, fmt.Sprintf("%+v %+v", evs, e.h.reg.Observations(sandboxID)))
		})
	}
}

func assertNoValue(t *testing.T, s string) {
	t.Helper()
	if strings.Contains(s, injSecret) {
		t.Fatalf("the secret's value is in %s", s)
	}
}

// A destination without a rule is spliced: the sandbox's own TLS reaches
// the host (the client verifies the host's own certificate, trusting
// only the test CA), and the placeholder arrives unchanged.
func TestInjectOtherHostsAreSplicedAndGetThePlaceholder(t *testing.T) {
	e := newInjEnv(t, []InjectRule{openaiRule})
	c := e.client(t, true, e.ca.pool)
	resp, body := get(t, c, "https://other.inject.test/", map[string]string{"Authorization": "Bearer " + injPlaceholder})
	if resp.StatusCode != 200 || !strings.Contains(body, "auth=Bearer "+injPlaceholder) {
		t.Fatalf("status %d, body %q", resp.StatusCode, body)
	}
	if resp.TLS.PeerCertificates[0].Issuer.CommonName != "inject test CA" {
		t.Fatalf("other host's certificate issued by %q", resp.TLS.PeerCertificates[0].Issuer.CommonName)
	}
	// The rule's host, to a client that trusts only the test CA, is not
	// the real host: the gateway's leaf does not verify there.
	if _, err := c.Get("https://api.inject.test/"); err == nil {
		t.Fatal("a client not trusting the sandbox's CA reached the rule's host")
	}
	if n := len(e.api.requests()); n != 0 {
		t.Fatalf("the rule's host received %d requests", n)
	}
}

// Requests for another host on a connection whose SNI names the rule's
// host are refused before reaching any host: HTTP/1.1 Host, a second
// request on a kept-alive connection, and an HTTP/2 stream's :authority.
func TestInjectRefusesAnotherHostBehindTheSNI(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		t.Run(fmt.Sprintf("h2=%v", h2), func(t *testing.T) {
			e := newInjEnv(t, []InjectRule{openaiRule})
			c := e.client(t, h2, e.sandboxRoots)
			// First request on the connection: fine.
			if resp, body := get(t, c, "https://api.inject.test/first", nil); resp.StatusCode != 200 {
				t.Fatalf("first: %d %s", resp.StatusCode, body)
			}
			// Same connection (the client reuses it), another Host.
			req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, "https://api.inject.test/second", nil)
			req.Host = "other.inject.test"
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(b), "refused") {
				t.Fatalf("another Host: %d %q", resp.StatusCode, b)
			}
			if !resp.TLS.DidResume && resp.TLS.ServerName != "api.inject.test" {
				t.Fatalf("not the rule's connection: %+v", resp.TLS.ServerName)
			}
			if n := len(e.other.requests()); n != 0 {
				t.Fatalf("other host received %d requests", n)
			}
			if got := e.api.requests(); len(got) != 1 || got[0].URL.Path != "/first" {
				t.Fatalf("rule's host received %d requests", len(got))
			}
			evs := e.events()
			if last := evs[len(evs)-1]; last.Status != 403 || !strings.Contains(last.Error, "host mismatch") {
				t.Fatalf("events %+v", evs)
			}
			e.h.observation(t, "api.inject.test", 443, Allowed, func(o Observation) bool { return o.LastStatus == 403 && o.Injected == 1 })
		})
	}
}

// Raw HTTP/1.1 on the TLS connection: pipelined requests, the second for
// another host; and a Host with another port.
func TestInjectPipelinedSecondHostRefused(t *testing.T) {
	e := newInjEnv(t, []InjectRule{openaiRule})
	raw := e.h.dial(t, netip.AddrPortFrom(injAPIAddr, 443))
	tc := tls.Client(raw, &tls.Config{ServerName: "api.inject.test", RootCAs: e.sandboxRoots, NextProtos: []string{"http/1.1"}})
	io.WriteString(tc, "GET /a HTTP/1.1\r\nHost: api.inject.test\r\n\r\nGET /b HTTP/1.1\r\nHost: other.inject.test\r\nAuthorization: Bearer "+injPlaceholder+"\r\n\r\n")
	br := bufio.NewReader(tc)
	for i, want := range []int{200, 403} {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("response %d: %v", i, err)
		}
		io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != want {
			t.Fatalf("response %d: status %d, want %d", i, resp.StatusCode, want)
		}
	}
	if n := len(e.other.requests()); n != 0 {
		t.Fatalf("other host received %d requests", n)
	}
	if got := e.api.requests(); len(got) != 1 {
		t.Fatalf("rule's host received %d requests", len(got))
	}
}

// The gateway does not follow a redirect: the sandbox gets it, and the
// host it names receives nothing from the gateway.
func TestInjectRedirectNotFollowed(t *testing.T) {
	e := newInjEnv(t, []InjectRule{openaiRule})
	e.api.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "https://other.inject.test/steal", http.StatusFound)
	})
	c := e.client(t, false, e.sandboxRoots)
	resp, _ := get(t, c, "https://api.inject.test/", nil)
	if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "https://other.inject.test/steal" {
		t.Fatalf("status %d location %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	if n := len(e.other.requests()); n != 0 {
		t.Fatalf("other host received %d requests", n)
	}
}

// An upstream whose certificate does not verify fails the request with a
// 502 naming the problem; the host receives no request.
func TestInjectUpstreamCertificateFailure(t *testing.T) {
	e := newInjEnv(t, []InjectRule{openaiRule, {Host: "bad.inject.test", Header: "Authorization", Value: "Bearer {secret:openai}"}})
	c := e.client(t, true, e.sandboxRoots)
	resp, body := get(t, c, "https://bad.inject.test/", nil)
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, "certificate of bad.inject.test does not verify") {
		t.Fatalf("status %d body %q", resp.StatusCode, body)
	}
	if n := len(e.bad.requests()); n != 0 {
		t.Fatalf("bad host received %d requests", n)
	}
	evs := e.events()
	if len(evs) != 1 || evs[0].Status != 502 || !strings.Contains(evs[0].Error, "certificate") {
		t.Fatalf("events %+v", evs)
	}
	// Each failure is reported.
	get(t, c, "https://bad.inject.test/", nil)
	if n := len(e.events()); n != 2 {
		t.Fatalf("%d events after two failures", n)
	}
}

// CONNECT through the gateway is a tunnel, never terminated: the sandbox's
// TLS inside it reaches the host itself, and nothing is injected.
func TestInjectConnectIsNotInjected(t *testing.T) {
	e := newInjEnv(t, []InjectRule{openaiRule})
	e.h.reg.SetPolicy(sandboxID, MustParse("api.inject.test", "other.inject.test", "bad.inject.test", "198.20.1.10"), Policy{})
	raw := e.h.dial(t, netip.AddrPortFrom(injAPIAddr, 443))
	io.WriteString(raw, "CONNECT 198.20.1.10:443 HTTP/1.1\r\nHost: 198.20.1.10:443\r\n\r\n")
	br := bufio.NewReader(raw)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	tc := tls.Client(bufConn{raw, br}, &tls.Config{ServerName: "api.inject.test", RootCAs: e.ca.pool})
	fmt.Fprintf(tc, "GET / HTTP/1.1\r\nHost: api.inject.test\r\nConnection: close\r\n\r\n")
	resp, err = http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if strings.Contains(string(b), injSecret) || !strings.Contains(string(b), "auth= ") {
		t.Fatalf("through CONNECT the host saw %q", b)
	}
}

// Plain HTTP to a rule's host is never injected.
func TestInjectPlainHTTPNotInjected(t *testing.T) {
	seen := make(chan string, 1)
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Get("Authorization")
	}))
	t.Cleanup(plain.Close)
	e := newInjEnv(t, []InjectRule{openaiRule, {Host: "api.inject.test", Port: 80, Header: "Authorization", Value: "Bearer {secret:openai}"}})
	e.h.gw.cfg.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, plain.Listener.Addr().String())
	}
	raw := e.h.dial(t, netip.AddrPortFrom(injAPIAddr, 80))
	io.WriteString(raw, "GET / HTTP/1.1\r\nHost: api.inject.test\r\nAuthorization: Bearer "+injPlaceholder+"\r\nConnection: close\r\n\r\n")
	if _, err := http.ReadResponse(bufio.NewReader(raw), nil); err != nil {
		t.Fatal(err)
	}
	if got := <-seen; got != "Bearer "+injPlaceholder {
		t.Fatalf("plain HTTP host saw %q", got)
	}
}

// A path prefix limits a rule, and the placeholder is swapped only where
// a rule naming its secret applies.
func TestInjectPathPrefix(t *testing.T) {
	e := newInjEnv(t, []InjectRule{{Host: "api.inject.test", PathPrefix: "/v1/", Header: "X-Key", Value: "{secret:openai}"}})
	c := e.client(t, false, e.sandboxRoots)
	_, body := get(t, c, "https://api.inject.test/v1/x", map[string]string{"Authorization": injPlaceholder})
	if !strings.Contains(body, "auth="+injSecret+" key="+injSecret) {
		t.Fatalf("under the prefix the host saw %q", body)
	}
	_, body = get(t, c, "https://api.inject.test/v2/x", map[string]string{"Authorization": injPlaceholder})
	if !strings.Contains(body, "auth="+injPlaceholder+" key=") || strings.Contains(body, injSecret) {
		t.Fatalf("outside the prefix the host saw %q", body)
	}
}

func TestSandboxCA(t *testing.T) {
	now := time.Now()
	clock := now
	ca, err := NewSandboxCA("sbx_x", func() time.Time { return clock })
	if err != nil {
		t.Fatal(err)
	}
	c := ca.Certificate()
	if !c.IsCA || c.MaxPathLen != 0 || !c.MaxPathLenZero {
		t.Fatalf("CA constraints: IsCA %v MaxPathLen %d zero %v", c.IsCA, c.MaxPathLen, c.MaxPathLenZero)
	}
	l1, err := ca.leaf("api.inject.test")
	if err != nil {
		t.Fatal(err)
	}
	if life := l1.Leaf.NotAfter.Sub(l1.Leaf.NotBefore); life > LeafLifetime {
		t.Fatalf("leaf lasts %v", life)
	}
	if l1.Leaf.IsCA || len(l1.Leaf.DNSNames) != 1 || l1.Leaf.DNSNames[0] != "api.inject.test" {
		t.Fatalf("leaf %+v", l1.Leaf)
	}
	pool := x509.NewCertPool()
	pool.AddCert(c)
	if _, err := l1.Leaf.Verify(x509.VerifyOptions{DNSName: "api.inject.test", Roots: pool, CurrentTime: now}); err != nil {
		t.Fatal(err)
	}
	if l2, _ := ca.leaf("api.inject.test"); l2 != l1 {
		t.Fatal("leaf not cached")
	}
	clock = now.Add(LeafLifetime * 4 / 5)
	if l3, _ := ca.leaf("api.inject.test"); l3 == l1 {
		t.Fatal("a leaf near its end is still served")
	}
	// Another sandbox's CA does not verify this one's leaves.
	other, _ := NewSandboxCA("sbx_y", nil)
	op := x509.NewCertPool()
	op.AddCert(other.Certificate())
	if _, err := l1.Leaf.Verify(x509.VerifyOptions{DNSName: "api.inject.test", Roots: op, CurrentTime: now}); err == nil {
		t.Fatal("another sandbox's CA verifies this one's leaf")
	}
}

// The gateway signs only for the hosts of the sandbox's rules: a TLS
// connection to an allowed host without a rule is spliced (the client
// gets the host's own certificate) even when the client offers the
// sandbox's CA alone.
func TestInjectNoLeafForOtherHosts(t *testing.T) {
	e := newInjEnv(t, []InjectRule{openaiRule})
	only := x509.NewCertPool()
	only.AddCert(e.sandboxCA.Certificate())
	c := e.client(t, false, only)
	if _, err := c.Get("https://other.inject.test/"); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("other host with the sandbox CA alone: %v", err)
	}
}

func TestCheckInject(t *testing.T) {
	for _, tc := range []struct {
		rule InjectRule
		err  string
	}{
		{InjectRule{Host: "API.example.com.", Header: "authorization", Value: "Bearer {secret:openai}"}, ""},
		{InjectRule{Host: "", Header: "A", Value: "{secret:a}"}, "host is required"},
		{InjectRule{Host: "*.example.com", Header: "A", Value: "{secret:a}"}, "wildcard"},
		{InjectRule{Host: "example.com:443", Header: "A", Value: "{secret:a}"}, "port"},
		{InjectRule{Host: "1.2.3.4", Header: "A", Value: "{secret:a}"}, "not an address"},
		{InjectRule{Host: "localhost", Header: "A", Value: "{secret:a}"}, "fully qualified"},
		{InjectRule{Host: "a.com", Port: 70000, Header: "A", Value: "{secret:a}"}, "port"},
		{InjectRule{Host: "a.com", PathPrefix: "v1", Header: "A", Value: "{secret:a}"}, "path_prefix"},
		{InjectRule{Host: "a.com", Header: "Bad Header", Value: "{secret:a}"}, "valid header"},
		{InjectRule{Host: "a.com", Header: "Host", Value: "{secret:a}"}, "cannot set"},
		{InjectRule{Host: "a.com", Header: "Proxy-Authorization", Value: "{secret:a}"}, "cannot set"},
		{InjectRule{Host: "a.com", Header: "A", Value: "plain"}, "names no secret"},
		{InjectRule{Host: "a.com", Header: "A", Value: "{secret:bad name}"}, "invalid"},
		{InjectRule{Host: "a.com", Header: "A", Value: "{secret:a} {secret:b"}, "closing"},
		{InjectRule{Host: "a.com", Header: "A", Value: "x\r\ny: {secret:a}"}, "characters"},
	} {
		_, err := CheckInject([]InjectRule{tc.rule})
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%+v: %v", tc.rule, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%+v: error %v, want %q", tc.rule, err, tc.err)
		}
	}
	got, _ := CheckInject([]InjectRule{{Host: "API.example.com.", Header: "authorization", Value: "Bearer {secret:openai}"}})
	if got[0].Host != "api.example.com" || got[0].Header != "Authorization" {
		t.Fatalf("canonical form %+v", got[0])
	}
}

// A connection for the rule's host to an address the resolver did not
// give for it (DNS changed under the sandbox, or an address of its
// choice) is refused before anything is terminated or sent.
func TestInjectWrongAddressForName(t *testing.T) {
	e := newInjEnv(t, []InjectRule{openaiRule})
	raw := e.h.dial(t, netip.AddrPortFrom(injOtherAddr, 443))
	tc := tls.Client(raw, &tls.Config{ServerName: "api.inject.test", RootCAs: e.sandboxRoots})
	tc.SetDeadline(time.Now().Add(5 * time.Second))
	if err := tc.Handshake(); err == nil {
		t.Fatal("handshake for api.inject.test at other.inject.test's address succeeded")
	}
	if n := len(e.api.requests()) + len(e.other.requests()); n != 0 {
		t.Fatalf("%d requests reached a host", n)
	}
	e.h.observation(t, "api.inject.test", 443, Denied, nil)
}

// TestInjectOnlyAtAGivenAddress: a CIDR rule allows the other host's
// address; a connection there under the rule's server name, an address no
// answer gave for that name, is spliced: the client sees the host's own
// certificate, and nothing is injected.
func TestInjectOnlyAtAGivenAddress(t *testing.T) {
	e := newInjEnv(t, []InjectRule{openaiRule})
	e.h.reg.SetPolicy(sandboxID, MustParse("api.inject.test", "other.inject.test", "bad.inject.test", injOtherAddr.String()+"/32:443"), Policy{})
	raw := e.h.dial(t, netip.AddrPortFrom(injOtherAddr, 443))
	tc := tls.Client(raw, &tls.Config{ServerName: "api.inject.test", InsecureSkipVerify: true})
	defer tc.Close()
	tc.SetDeadline(time.Now().Add(5 * time.Second))
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	if leaf := tc.ConnectionState().PeerCertificates[0]; leaf.Subject.CommonName == "api.inject.test" || leaf.Issuer.CommonName == e.sandboxCA.Certificate().Subject.CommonName {
		t.Fatalf("the gateway terminated the connection (leaf %s by %s)", leaf.Subject, leaf.Issuer)
	}
	fmt.Fprintf(tc, "GET / HTTP/1.1\r\nHost: api.inject.test\r\nAuthorization: Bearer %s\r\nConnection: close\r\n\r\n", injPlaceholder)
	io.ReadAll(tc)
	for _, r := range e.other.requests() {
		if strings.Contains(r.Header.Get("Authorization"), injSecret) {
			t.Fatal("the other host received the value")
		}
	}
	if n := len(e.other.requests()); n != 1 {
		t.Fatalf("the other host received %d requests", n)
	}
}

// TestInjectSecretsReplacedWhileRunning: SetInjectSecrets gives a running
// sandbox a secret's new value and keeps its rules; new connections use it.
func TestInjectSecretsReplacedWhileRunning(t *testing.T) {
	e := newInjEnv(t, []InjectRule{openaiRule})
	e.h.reg.SetInjectSecrets(sandboxID, map[string]string{"openai": "sk-rotated"}, map[string]string{"openai": injPlaceholder})
	resp, body := get(t, e.client(t, false, e.sandboxRoots), "https://api.inject.test/", map[string]string{"Authorization": "Bearer " + injPlaceholder})
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	if got := e.api.requests(); len(got) != 1 || got[0].Header.Get("Authorization") != "Bearer sk-rotated" {
		t.Fatalf("the host received %q", got[0].Header.Get("Authorization"))
	}
}
