package netpolicy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// Outcomes a client sees.
const (
	wantOK    = "ok"
	want403   = "403"
	wantReset = "reset"
)

func TestGatewayDecisions(t *testing.T) {
	s := startServers(t)
	ap := netip.AddrPortFrom
	metadata := netip.MustParseAddr("169.254.169.254")
	gatewayOwn := netip.MustParseAddr("198.51.100.1")
	tests := []struct {
		name    string
		allow   []string
		setup   bool // the allow list is the setup policy, and it is in use
		resolve []string
		dst     netip.AddrPort // zero: the HTTP server's real loopback address
		client  string         // http, tls, raw, banner, connect
		host    string         // Host, SNI or CONNECT target
		want    string
		wantMsg string // 403 body (substring)
		obsDest string
		obsPort int
	}{
		// By name, once the resolver gave the address for it.
		{name: "http host allowed", allow: []string{"api.example.test"}, resolve: []string{"api.example.test"},
			dst: ap(apiAddr, 80), client: "http", host: "api.example.test", want: wantOK, obsDest: "api.example.test", obsPort: 80},
		{name: "http host allowed by suffix and port", allow: []string{"*.example.test:80"}, resolve: []string{"api.example.test"},
			dst: ap(apiAddr, 80), client: "http", host: "API.example.test:80", want: wantOK, obsDest: "api.example.test", obsPort: 80},
		{name: "tls sni allowed", allow: []string{"example.com:443"}, resolve: []string{"example.com"},
			dst: ap(tlsAddr, 443), client: "tls", host: "example.com", want: wantOK, obsDest: "example.com", obsPort: 443},

		// Denied names.
		{name: "http host denied", resolve: nil, dst: ap(apiAddr, 80), client: "http", host: "api.example.test", want: want403,
			wantMsg: `cove: api.example.test:80 is not allowed by this sandbox's network policy; allow it with PATCH /v1/sandboxes/sb1 {"network":{"allow":["api.example.test"]}}`,
			obsDest: "api.example.test", obsPort: 80},
		{name: "http host denied on setup policy", setup: true, dst: ap(apiAddr, 80), client: "http", host: "api.example.test", want: want403,
			wantMsg: `cove: api.example.test:80 is not allowed by this sandbox's setup network policy; allow it by adding "api.example.test" to the sandbox's setup.network.allow`,
			obsDest: "api.example.test", obsPort: 80},
		{name: "http wrong port", allow: []string{"api.example.test:443"}, resolve: []string{"api.example.test"},
			dst: ap(apiAddr, 80), client: "http", host: "api.example.test", want: want403, wantMsg: "not allowed", obsDest: "api.example.test", obsPort: 80},
		{name: "tls sni denied", allow: []string{"api.example.test"}, resolve: []string{"api.example.test"},
			dst: ap(tlsAddr, 443), client: "tls", host: "example.com", want: wantReset, obsDest: "example.com", obsPort: 443},

		// Spoofing an allowed name onto an address not given for it.
		{name: "host spoofed onto other address", allow: []string{"api.example.test", "echo.example.test"}, resolve: []string{"api.example.test", "echo.example.test"},
			dst: ap(echoAddr, 7), client: "http", host: "api.example.test", want: want403,
			wantMsg: "198.20.0.40 is not an address this sandbox's resolver gave for api.example.test", obsDest: "api.example.test", obsPort: 7},
		{name: "sni spoofed, name never resolved", allow: []string{"example.com", "api.example.test"}, resolve: []string{"api.example.test"},
			dst: ap(apiAddr, 443), client: "tls", host: "example.com", want: wantReset, obsDest: "example.com", obsPort: 443},
		{name: "host of a denied name on an allowed address", allow: []string{"api.example.test"}, resolve: []string{"api.example.test"},
			dst: ap(apiAddr, 80), client: "http", host: "other.example.test", want: want403, wantMsg: "other.example.test:80 is not allowed", obsDest: "other.example.test", obsPort: 80},

		// Raw TCP: by address.
		{name: "raw allowed by resolved name", allow: []string{"echo.example.test:7"}, resolve: []string{"echo.example.test"},
			dst: ap(echoAddr, 7), client: "raw", want: wantOK, obsDest: "echo.example.test", obsPort: 7},
		{name: "raw name not resolved", allow: []string{"echo.example.test:7"},
			dst: ap(echoAddr, 7), client: "raw", want: wantReset, obsDest: "198.20.0.40", obsPort: 7},
		{name: "raw wrong port", allow: []string{"echo.example.test:8"}, resolve: []string{"echo.example.test"},
			dst: ap(echoAddr, 7), client: "raw", want: wantReset, obsDest: "198.20.0.40", obsPort: 7},
		{name: "server speaks first allowed", allow: []string{"mail.example.test:25"}, resolve: []string{"mail.example.test"},
			dst: ap(bannerAddr, 25), client: "banner", want: wantOK, obsDest: "mail.example.test", obsPort: 25},
		{name: "server speaks first denied", allow: []string{"mail.example.test:587"}, resolve: []string{"mail.example.test"},
			dst: ap(bannerAddr, 25), client: "banner", want: wantReset, obsDest: "198.20.0.50", obsPort: 25},

		// CIDR rules.
		{name: "cidr port opens that port", allow: []string{"198.20.0.0/24:25"},
			dst: ap(bannerAddr, 25), client: "banner", want: wantOK, obsDest: "198.20.0.50", obsPort: 25},
		{name: "cidr port closes others", allow: []string{"198.20.0.0/24:25"},
			dst: ap(bannerAddr, 587), client: "banner", want: wantReset, obsDest: "198.20.0.50", obsPort: 587},
		{name: "cidr allows any name on it", allow: []string{"198.20.0.10/32"},
			dst: ap(apiAddr, 80), client: "http", host: "whatever.test", want: wantOK, obsDest: "whatever.test", obsPort: 80},
		{name: "raw denied by address", dst: ap(echoAddr, 7), client: "raw", want: wantReset, obsDest: "198.20.0.40", obsPort: 7},

		// Private, loopback, metadata and the node itself.
		{name: "loopback refused by name", allow: []string{"local.example.test"}, resolve: []string{"local.example.test"},
			client: "http", host: "local.example.test", want: want403,
			wantMsg: "is this node itself (its network gateway, its host or its sandboxes) and is never a destination",
			obsDest: "local.example.test"},
		{name: "loopback refused even by cidr", allow: []string{"127.0.0.1/32"},
			client: "http", host: "local.example.test", want: want403, wantMsg: "is this node itself", obsDest: "local.example.test"},
		{name: "loopback raw refused", allow: []string{"local.example.test"}, resolve: []string{"local.example.test"},
			client: "raw", want: wantReset, obsDest: "127.0.0.1"},
		{name: "private by name refused", allow: []string{"private.example.test"}, resolve: []string{"private.example.test"},
			dst: ap(privateAddr, 80), client: "http", host: "private.example.test", want: want403,
			wantMsg: "(10.1.2.3) is a private, loopback, link-local or other special-purpose address, reachable only through a CIDR rule; allow it with PATCH /v1/sandboxes/sb1 {\"network\":{\"allow\":[\"10.1.2.3/32:80\"]}}",
			obsDest: "private.example.test", obsPort: 80},
		{name: "metadata refused", allow: []string{"*.example.test"},
			dst: ap(metadata, 80), client: "http", host: "api.example.test", want: want403,
			wantMsg: "(169.254.169.254) is a cloud metadata address, reachable only through a rule naming that address exactly; allow it with PATCH /v1/sandboxes/sb1 {\"network\":{\"allow\":[\"169.254.169.254/32:80\"]}}",
			obsDest: "api.example.test", obsPort: 80},
		{name: "metadata allowed by its address", allow: []string{"169.254.169.254"},
			dst: ap(metadata, 80), client: "http", host: "api.example.test", want: wantOK, obsDest: "api.example.test", obsPort: 80},
		{name: "gateway own address", allow: []string{"0.0.0.0/0", "api.example.test"}, resolve: []string{"api.example.test"},
			dst: ap(gatewayOwn, 80), client: "http", host: "api.example.test", want: want403, wantMsg: "is this node itself", obsDest: "api.example.test", obsPort: 80},

		{name: "address the gateway is reached on", allow: []string{"127.0.0.0/8"},
			dst: ap(netip.MustParseAddr("127.0.0.3"), 22), client: "http", host: "api.example.test", want: want403, wantMsg: "127.0.0.3:22 is this node itself", obsDest: "api.example.test", obsPort: 22},
		{name: "connect to the gateway's address", allow: []string{"127.0.0.0/8"}, dst: ap(gatewayOwn, 3128), client: "connect", host: "127.0.0.3:22",
			want: want403, wantMsg: "is this node itself", obsDest: "127.0.0.3", obsPort: 22},

		// CONNECT (HTTPS_PROXY).
		{name: "connect allowed", allow: []string{"example.com:443"}, dst: ap(gatewayOwn, 3128), client: "connect", host: "example.com:443",
			want: wantOK, obsDest: "example.com", obsPort: 443},
		{name: "connect denied", allow: []string{"example.com:443"}, dst: ap(gatewayOwn, 3128), client: "connect", host: "other.example.test:443",
			want: want403, wantMsg: `cove: other.example.test:443 is not allowed by this sandbox's network policy`, obsDest: "other.example.test", obsPort: 443},
		{name: "connect wrong port", allow: []string{"example.com:443"}, dst: ap(gatewayOwn, 3128), client: "connect", host: "example.com:8443",
			want: want403, obsDest: "example.com", obsPort: 8443},
		{name: "connect to loopback name refused", allow: []string{"local.example.test"}, dst: ap(gatewayOwn, 3128), client: "connect", host: "local.example.test:443",
			want: want403, wantMsg: "is this node itself", obsDest: "local.example.test", obsPort: 443},
		{name: "connect to metadata name refused", allow: []string{"meta.example.test"}, dst: ap(gatewayOwn, 3128), client: "connect", host: "meta.example.test:80",
			want: want403, wantMsg: "(169.254.169.254) is a cloud metadata address", obsDest: "meta.example.test", obsPort: 80},
		{name: "connect to address literal needs a rule", allow: []string{"example.com"}, dst: ap(gatewayOwn, 3128), client: "connect", host: "198.20.0.30:443",
			want: want403, obsDest: "198.20.0.30", obsPort: 443},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			policy, setup := MustParse(tt.allow...), Policy{}
			if tt.setup {
				policy, setup = Policy{}, policy
			}
			h := newHarness(t, harnessConfig{Routes: s.routes(), Gateway: GatewayConfig{Local: []netip.Addr{gatewayOwn}}}, policy, setup)
			h.reg.UseSetup(sandboxID, tt.setup)
			for _, n := range tt.resolve {
				if resp := h.lookup(t, n); len(resp.Answer) == 0 {
					t.Fatalf("resolving %s: %v", n, resp)
				}
			}
			dst := tt.dst
			if !dst.IsValid() {
				dst = s.httpLocal()
			}
			obsPort := tt.obsPort
			if obsPort == 0 {
				obsPort = int(dst.Port())
			}
			if tt.client == "connect" {
				obsPort = tt.obsPort
			}

			start := time.Now()
			c := h.dial(t, dst)
			c.SetDeadline(time.Now().Add(5 * time.Second))
			got, msg, err := runClient(c, tt.client, tt.host, s)
			elapsed := time.Since(start)
			if got != tt.want {
				t.Fatalf("outcome = %s (%q, err %v), want %s", got, msg, err, tt.want)
			}
			if tt.wantMsg != "" && !strings.Contains(msg, tt.wantMsg) {
				t.Errorf("403 body = %q, want it to contain %q", msg, tt.wantMsg)
			}
			if got != wantOK && elapsed > 2*time.Second {
				t.Errorf("denial took %v, want < 2s", elapsed)
			}
			decision := Allowed
			if tt.want != wantOK {
				decision = Denied
				if d := h.dials(); len(d) != 0 {
					t.Errorf("denied connection dialled %v", d)
				}
				if ev := h.deniedEvents(); len(ev) != 1 || ev[0].Destination != tt.obsDest || ev[0].Port != obsPort {
					t.Errorf("denied events = %+v, want one for %s:%d", ev, tt.obsDest, obsPort)
				}
			}
			h.observation(t, tt.obsDest, obsPort, decision, func(o Observation) bool { return o.Count == 1 })
		})
	}
}

// runClient plays one kind of client on c and reports what it saw: ok, 403
// (with the body) or reset.
func runClient(c net.Conn, kind, host string, s *testServers) (outcome, msg string, err error) {
	switch kind {
	case "http":
		resp, body, err := httpGet(c, host, "/")
		switch {
		case err != nil:
			return wantReset, "", err
		case resp.StatusCode == 403:
			if resp.Header.Get("Content-Type") != "text/plain; charset=utf-8" || strings.Contains(body, "\n") {
				return "bad 403", body, nil
			}
			return want403, body, nil
		case resp.StatusCode == 200 && body == "host="+host:
			return wantOK, body, nil
		}
		return fmt.Sprintf("status %d", resp.StatusCode), body, nil
	case "tls":
		resp, body, err := tlsGet(c, host, s.roots)
		if err != nil {
			return wantReset, "", err
		}
		if resp.StatusCode == 200 && body == "host="+host {
			return wantOK, body, nil
		}
		return fmt.Sprintf("status %d", resp.StatusCode), body, nil
	case "raw":
		if _, err := io.WriteString(c, "\x00ping"); err != nil {
			return wantReset, "", err
		}
		buf := make([]byte, 5)
		if _, err := io.ReadFull(c, buf); err != nil {
			return wantReset, "", err
		}
		if string(buf) == "\x00ping" {
			return wantOK, "", nil
		}
		return "garbled", string(buf), nil
	case "banner":
		buf := make([]byte, 11)
		if _, err := io.ReadFull(c, buf); err != nil {
			return wantReset, "", err
		}
		if string(buf) == "220 hello\r\n" {
			return wantOK, "", nil
		}
		return "garbled", string(buf), nil
	case "connect":
		resp, br, err := connect(c, host)
		if err != nil {
			return wantReset, "", err
		}
		if resp.StatusCode == 403 {
			body, _ := io.ReadAll(resp.Body)
			return want403, strings.TrimSpace(string(body)), nil
		}
		if resp.StatusCode != 200 {
			return fmt.Sprintf("status %d", resp.StatusCode), "", nil
		}
		name, _, _ := net.SplitHostPort(host)
		return runClient(bufConn{c, br}, "tls", name, s)
	}
	panic("unknown client " + kind)
}

func isReset(err error) bool {
	return err != nil && !errors.Is(err, os.ErrDeadlineExceeded)
}

func TestGatewayResetIsQuick(t *testing.T) {
	s := startServers(t)
	h := newHarness(t, harnessConfig{Routes: s.routes()}, Policy{}, Policy{})
	for _, tt := range []struct {
		name string
		dst  netip.AddrPort
		send string
	}{
		{"tls", netip.AddrPortFrom(tlsAddr, 443), ""},
		{"silent client", netip.AddrPortFrom(bannerAddr, 25), ""},
		{"raw", netip.AddrPortFrom(echoAddr, 7), "\x00\x01binary"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			c := h.dial(t, tt.dst)
			if tt.name == "tls" {
				_, _, err := tlsGet(c, "example.com", s.roots)
				if !isReset(err) {
					t.Fatalf("TLS handshake err = %v, want a reset", err)
				}
			} else {
				if tt.send != "" {
					io.WriteString(c, tt.send)
				}
				c.SetReadDeadline(time.Now().Add(3 * time.Second))
				_, err := c.Read(make([]byte, 1))
				if !isReset(err) {
					t.Fatalf("read err = %v, want a reset", err)
				}
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("reset after %v, want < 2s", d)
			}
		})
	}
}

func TestGatewayUnknownSource(t *testing.T) {
	s := startServers(t)
	h := newHarness(t, harnessConfig{Routes: s.routes()}, MustParse("0.0.0.0/0"), Policy{})
	start := time.Now()
	// The reset can come so fast that even connect(2) sees it.
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}
	c, err := d.DialContext(t.Context(), "tcp", h.gwAddr)
	if err == nil {
		defer c.Close()
		c.SetDeadline(time.Now().Add(3 * time.Second))
		_, _, err = httpGet(c, "api.example.test", "/")
	}
	if !isReset(err) {
		t.Fatalf("connection from an unknown source: err %v, want it closed", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("closed after %v, want at once", d)
	}
	if d := h.dials(); len(d) != 0 {
		t.Errorf("unknown source dialled %v", d)
	}
}

func TestGatewayPolicyChange(t *testing.T) {
	s := startServers(t)
	h := newHarness(t, harnessConfig{Routes: s.routes()}, MustParse("api.example.test", "echo.example.test:7"), Policy{})
	h.lookup(t, "api.example.test")
	h.lookup(t, "echo.example.test")
	dst := netip.AddrPortFrom(apiAddr, 80)
	echo := func(c net.Conn) error {
		if _, err := io.WriteString(c, "\x00ping"); err != nil {
			return err
		}
		_, err := io.ReadFull(c, make([]byte, 5))
		return err
	}

	old := h.dial(t, netip.AddrPortFrom(echoAddr, 7))
	if err := echo(old); err != nil {
		t.Fatalf("before the change: %v", err)
	}
	h.reg.SetPolicy(sandboxID, MustParse("example.com"), Policy{})

	c := h.dial(t, dst)
	if resp, _, err := httpGet(c, "api.example.test", "/"); err != nil || resp.StatusCode != 403 {
		t.Fatalf("new connection after the change: %v, %v; want 403", resp, err)
	}
	// The open connection goes on.
	if err := echo(old); err != nil {
		t.Fatalf("old connection after the change: %v", err)
	}
	// DNS follows too.
	if resp := h.lookup(t, "api.example.test"); resp.Rcode == 0 {
		t.Errorf("resolver still answers a name no longer allowed: %v", resp)
	}
}

func TestGatewayUseSetup(t *testing.T) {
	s := startServers(t)
	h := newHarness(t, harnessConfig{Routes: s.routes()}, MustParse("example.com"), MustParse("example.com", "api.example.test"))
	dst := netip.AddrPortFrom(apiAddr, 80)
	get := func() int {
		t.Helper()
		resp, _, err := httpGet(h.dial(t, dst), "api.example.test", "/")
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode
	}
	if rc := h.lookup(t, "api.example.test").Rcode; rc == 0 {
		t.Fatal("normal policy: name resolves")
	}
	if code := get(); code != 403 {
		t.Fatalf("normal policy: status %d, want 403", code)
	}
	h.reg.UseSetup(sandboxID, true)
	h.lookup(t, "api.example.test")
	if code := get(); code != 200 {
		t.Fatalf("setup policy: status %d, want 200", code)
	}
	h.reg.UseSetup(sandboxID, false)
	if code := get(); code != 403 {
		t.Fatalf("back to normal: status %d, want 403", code)
	}
}

func TestGatewayBytes(t *testing.T) {
	s := startServers(t)
	h := newHarness(t, harnessConfig{Routes: s.routes()}, MustParse("api.example.test"), Policy{})
	h.lookup(t, "api.example.test")
	const size = 1 << 20
	tests := []struct {
		name string
		do   func(c net.Conn) error
		out  int64 // the payload the sandbox sends (headers come on top)
		in   int64
	}{
		{name: "upload", out: size, do: func(c net.Conn) error {
			_, err := fmt.Fprintf(c, "POST /upload HTTP/1.1\r\nHost: api.example.test\r\nContent-Length: %d\r\nConnection: close\r\n\r\n", size)
			if err == nil {
				_, err = io.CopyN(c, zeros{}, size)
			}
			if err == nil {
				_, err = io.Copy(io.Discard, c)
			}
			return err
		}},
		{name: "download", in: size, do: func(c net.Conn) error {
			_, err := fmt.Fprintf(c, "GET /download?n=%d HTTP/1.1\r\nHost: api.example.test\r\nConnection: close\r\n\r\n", size)
			if err == nil {
				_, err = io.Copy(io.Discard, c)
			}
			return err
		}},
	}
	var wantOut, wantIn int64
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &countingConn{Conn: h.dial(t, netip.AddrPortFrom(apiAddr, 80))}
			if err := tt.do(c); err != nil {
				t.Fatal(err)
			}
			c.Close()
			wantOut += c.out
			wantIn += c.in
			if c.out < tt.out || c.in < tt.in {
				t.Fatalf("client moved %d out, %d in; want at least %d, %d", c.out, c.in, tt.out, tt.in)
			}
		})
	}
	within := func(got, want int64) bool {
		return float64(got) >= 0.95*float64(want) && float64(got) <= 1.05*float64(want)
	}
	o := h.observation(t, "api.example.test", 80, Allowed, func(o Observation) bool {
		return o.Count == 2 && within(o.BytesOut, wantOut) && within(o.BytesIn, wantIn)
	})
	t.Logf("client: %d out, %d in; observed: %d out, %d in", wantOut, wantIn, o.BytesOut, o.BytesIn)
}

type countingConn struct {
	net.Conn
	out, in int64
}

func (c *countingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.out += int64(n)
	return n, err
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.in += int64(n)
	return n, err
}

func TestGatewayDeniedEvery(t *testing.T) {
	s := startServers(t)
	clock := newFakeClock()
	h := newHarness(t, harnessConfig{Routes: s.routes(), Registry: RegistryConfig{DeniedEvery: 10 * time.Second, Now: clock.Now}}, Policy{}, Policy{})
	deny := func(dst netip.AddrPort) {
		t.Helper()
		resp, _, err := httpGet(h.dial(t, dst), "api.example.test", "/")
		if err != nil || resp.StatusCode != 403 {
			t.Fatalf("want 403, got %v, %v", resp, err)
		}
	}
	deny(netip.AddrPortFrom(apiAddr, 80))
	deny(netip.AddrPortFrom(apiAddr, 80))
	clock.Advance(5 * time.Second)
	deny(netip.AddrPortFrom(apiAddr, 80))
	deny(netip.AddrPortFrom(apiAddr, 8080)) // another port: its own limit
	clock.Advance(5 * time.Second)
	deny(netip.AddrPortFrom(apiAddr, 80))
	h.lookup(t, "api.example.test") // DNS: destination api.example.test:53
	h.lookup(t, "api.example.test")

	var got []string
	for _, o := range h.deniedEvents() {
		got = append(got, fmt.Sprintf("%s:%d", o.Destination, o.Port))
	}
	want := []string{"api.example.test:80", "api.example.test:8080", "api.example.test:80", "api.example.test:53"}
	if !slices.Equal(got, want) {
		t.Errorf("denied events = %v, want %v", got, want)
	}
	o := h.observation(t, "api.example.test", 80, Denied, nil)
	if o.Count != 4 {
		t.Errorf("observed %d denials of :80, want 4", o.Count)
	}
}

func TestGatewayServeStops(t *testing.T) {
	s := startServers(t)
	reg := NewRegistry(RegistryConfig{}, nil)
	reg.Add(sandboxID, sandboxAddr, MustParse(echoAddr.String()), Policy{})
	gw := NewGateway(GatewayConfig{
		OriginalDst: func(net.Conn) (netip.AddrPort, error) { return netip.AddrPortFrom(echoAddr, 7), nil },
		Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, s.echo)
		},
	}, reg, nil, nil)
	l, err := net.Listen("tcp", gatewayListenAddr)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- gw.Serve(ctx, l) }()

	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "\x00hi")
	if _, err := io.ReadFull(c, make([]byte, 3)); err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve = %v, want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return with a connection open")
	}
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Read(make([]byte, 1)); !isReset(err) {
		t.Errorf("open connection after Serve returned: read err %v", err)
	}
}
