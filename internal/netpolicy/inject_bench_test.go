package netpolicy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"testing"
	"time"
)

// injBench is a registry and gateway on loopback in front of one TLS host
// serving api.inject.test (which has an injection rule) and
// other.inject.test (which has none): the same host, reached injected or
// spliced.
type injBench struct {
	gwAddr string
	host   *injHost
	roots  *x509.CertPool
	reg    *Registry

	mu  sync.Mutex
	dst map[netip.AddrPort]netip.AddrPort // client address → original destination
}

func newInjBench(b *testing.B) *injBench {
	b.Helper()
	ca := newTestCA(b)
	e := &injBench{dst: map[netip.AddrPort]netip.AddrPort{}}
	e.host = startInjHost(b, ca.leaf(b, "api.inject.test", "other.inject.test"), func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("bytes"))
		w.Write(make([]byte, n))
	})
	upstream := e.host.srv.Listener.Addr().String()
	e.reg = NewRegistry(RegistryConfig{}, nil)
	e.reg.Add(sandboxID, sandboxAddr, MustParse("api.inject.test", "other.inject.test"), Policy{})
	sca, err := NewSandboxCA(sandboxID, nil)
	if err != nil {
		b.Fatal(err)
	}
	rules, _ := CheckInject([]InjectRule{openaiRule})
	e.reg.SetInjection(sandboxID, &Injection{Rules: rules, Secrets: map[string]string{"openai": injSecret}}, sca)
	e.reg.mu.Lock()
	sb := e.reg.byID[sandboxID]
	e.reg.mu.Unlock()
	e.reg.remember(sb, "api.inject.test", []netip.Addr{injAPIAddr})
	e.reg.remember(sb, "other.inject.test", []netip.Addr{injOtherAddr})
	gw := NewGateway(GatewayConfig{
		UpstreamRoots: ca.pool,
		// The client registers its destination once connected: wait for
		// it, as nftables would have it at once.
		OriginalDst: func(c net.Conn) (netip.AddrPort, error) {
			for range 1000 {
				e.mu.Lock()
				// Taken once: a later connection from the same port
				// registers its own.
				d, ok := e.dst[addrPort(c.RemoteAddr())]
				delete(e.dst, addrPort(c.RemoteAddr()))
				e.mu.Unlock()
				if ok {
					return d, nil
				}
				time.Sleep(time.Millisecond)
			}
			return netip.AddrPort{}, fmt.Errorf("no destination for %s", c.RemoteAddr())
		},
		Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, upstream)
		},
	}, e.reg, nil, nil)
	gl, err := net.Listen("tcp", gatewayListenAddr)
	if err != nil {
		b.Fatal(err)
	}
	e.gwAddr = gl.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- gw.Serve(ctx, gl) }()
	b.Cleanup(func() { cancel(); <-done })
	e.roots = x509.NewCertPool()
	e.roots.AddCert(ca.cert)
	e.roots.AddCert(sca.Certificate())
	return e
}

// client is the sandbox's HTTP client: every connection goes through the
// gateway as if to its host's address.
func (e *injBench) client(b *testing.B, h2 bool) *http.Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			host, _, _ := net.SplitHostPort(addr)
			c, err := (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IP(sandboxAddr.AsSlice())}}).DialContext(ctx, network, e.gwAddr)
			if err != nil {
				return nil, err
			}
			e.mu.Lock()
			e.dst[addrPort(c.LocalAddr())] = netip.AddrPortFrom(addrOf[host], 443)
			e.mu.Unlock()
			return c, nil
		},
		TLSClientConfig:     &tls.Config{RootCAs: e.roots},
		ForceAttemptHTTP2:   h2,
		MaxIdleConnsPerHost: 1,
	}
	if !h2 {
		tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	}
	b.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

func fetch(b *testing.B, c *http.Client, url string) int64 {
	resp, err := c.Get(url)
	if err != nil {
		b.Fatal(err)
	}
	n, _ := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		b.Fatalf("%s: %d", url, resp.StatusCode)
	}
	return n
}

// BenchmarkInject compares, in one run, a request to the same TLS host
// through the gateway terminated for injection (api.inject.test) and
// spliced (other.inject.test): on a kept-alive connection (HTTP/1.1 and
// HTTP/2), each on a new connection (TLS handshakes included), and 1 MiB
// downloads (throughput).
func BenchmarkInject(b *testing.B) {
	for _, c := range []struct {
		name   string
		h2     bool
		fresh  bool
		size   int
		metric string
	}{
		{"request/http1", false, false, 16, ""},
		{"request/http2", true, false, 16, ""},
		{"new-connection/http1", false, true, 16, ""},
		{"download-1MiB/http2", true, false, 1 << 20, ""},
	} {
		b.Run(c.name, func(b *testing.B) {
			e := newInjBench(b)
			per := map[string]time.Duration{}
			for _, host := range []string{"other.inject.test", "api.inject.test"} {
				url := fmt.Sprintf("https://%s/?bytes=%d", host, c.size)
				cl := e.client(b, c.h2)
				fetch(b, cl, url) // the connection (kept alive or not), warm
				n := max(b.N, 20)
				start := time.Now()
				for range n {
					if c.fresh {
						cl.Transport.(*http.Transport).CloseIdleConnections()
					}
					fetch(b, cl, url)
				}
				per[host] = time.Since(start) / time.Duration(n)
			}
			spliced, injected := per["other.inject.test"], per["api.inject.test"]
			b.ReportMetric(float64(spliced.Microseconds()), "spliced-µs/req")
			b.ReportMetric(float64(injected.Microseconds()), "injected-µs/req")
			b.ReportMetric(float64(injected-spliced)/1e3, "added-µs/req")
			if c.size >= 1<<20 {
				b.ReportMetric(float64(c.size)/1e6/spliced.Seconds(), "spliced-MB/s")
				b.ReportMetric(float64(c.size)/1e6/injected.Seconds(), "injected-MB/s")
			}
			o := e.reg.Observations(sandboxID)
			var inj int64
			for _, x := range o {
				inj += x.Injected
			}
			if inj < 20 {
				b.Fatalf("only %d requests injected: %+v", inj, o)
			}
		})
	}
}

// BenchmarkSandboxCALeaf: the cost of a leaf for a rule's host, issued
// (a new ECDSA P-256 key and signature each time) and from the cache.
func BenchmarkSandboxCALeaf(b *testing.B) {
	ca, err := NewSandboxCA(sandboxID, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("issue", func(b *testing.B) {
		for b.Loop() {
			if _, err := ca.issue("api.inject.test", time.Now()); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("cached", func(b *testing.B) {
		ca.leaf("api.inject.test")
		for b.Loop() {
			if _, err := ca.leaf("api.inject.test"); err != nil {
				b.Fatal(err)
			}
		}
	})
}
