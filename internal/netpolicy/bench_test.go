package netpolicy

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// BenchmarkGatewayThroughput sends b.N MiB through the gateway and b.N MiB
// over a direct loopback connection to the same sink, and reports both rates
// and their ratio.
func BenchmarkGatewayThroughput(b *testing.B) {
	const chunk = 1 << 20
	// The sink reads to EOF and answers the byte count.
	sink := listenB(b)
	go func() {
		for {
			c, err := sink.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				n, _ := io.Copy(io.Discard, c)
				binary.Write(c, binary.BigEndian, n)
			}()
		}
	}()
	// The sandbox connects to a pretend-public address (loopback is never a
	// destination); the gateway dials the sink for it.
	dst := netip.AddrPortFrom(echoAddr, 9)
	reg := NewRegistry(RegistryConfig{}, nil)
	reg.Add(sandboxID, sandboxAddr, MustParse(echoAddr.String()), Policy{})
	gw := NewGateway(GatewayConfig{
		OriginalDst: func(net.Conn) (netip.AddrPort, error) { return dst, nil },
		Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, sink.Addr().String())
		},
	}, reg, nil, nil)
	gl, err := net.Listen("tcp", gatewayListenAddr)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- gw.Serve(ctx, gl) }()
	b.Cleanup(func() {
		cancel()
		<-done
	})

	buf := make([]byte, chunk)
	send := func(addr string, n int) time.Duration {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		start := time.Now()
		for range n {
			if _, err := c.Write(buf); err != nil {
				b.Fatal(err)
			}
		}
		c.(*net.TCPConn).CloseWrite()
		var got int64
		if err := binary.Read(c, binary.BigEndian, &got); err != nil {
			b.Fatal(err)
		}
		d := time.Since(start)
		if got != int64(n)*chunk {
			b.Fatalf("sink got %d bytes, want %d", got, n*chunk)
		}
		return d
	}

	n := max(b.N, 16) // at least 16 MiB a side
	b.SetBytes(chunk)
	b.ResetTimer()
	gwTime := send(gl.Addr().String(), n)
	b.StopTimer()
	directTime := send(sink.Addr().String(), n)

	mb := float64(n) * chunk / 1e6
	gwRate, directRate := mb/gwTime.Seconds(), mb/directTime.Seconds()
	b.ReportMetric(gwRate, "gateway-MB/s")
	b.ReportMetric(directRate, "direct-MB/s")
	b.ReportMetric(gwRate/directRate, "ratio")
	if o := reg.Observations(sandboxID); len(o) != 1 || o[0].Count < 1 {
		b.Fatalf("observations %+v", o)
	}
}

func listenB(b *testing.B) net.Listener {
	b.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	return l
}

// BenchmarkRefusedConnection: what a sandbox at its MaxConns costs the
// gateway per further connection (an accept, a lookup, a reset), measured
// as the client sees it: a connect and the reset, b.N times. The baseline,
// direct, is a listener that resets every connection it accepts.
func BenchmarkRefusedConnection(b *testing.B) {
	refuseAll := func(b *testing.B, addr string) {
		buf := make([]byte, 1)
		b.ResetTimer()
		for range b.N {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				continue // reset before the connect returned
			}
			if _, err := c.Read(buf); err == nil {
				b.Fatal("a connection was not reset")
			}
			c.Close()
		}
	}
	b.Run("gateway", func(b *testing.B) {
		reg := NewRegistry(RegistryConfig{}, nil)
		reg.Add(sandboxID, sandboxAddr, MustParse(echoAddr.String()), Policy{})
		if _, _, ok := reg.admit(sandboxAddr, slotConn, 1); !ok { // the one connection it may have
			b.Fatal("no slot")
		}
		dst := netip.AddrPortFrom(echoAddr, 9)
		gw := NewGateway(GatewayConfig{
			MaxConns:    1,
			OriginalDst: func(net.Conn) (netip.AddrPort, error) { return dst, nil },
		}, reg, nil, nil)
		gl, err := net.Listen("tcp", gatewayListenAddr)
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- gw.Serve(ctx, gl) }()
		b.Cleanup(func() {
			cancel()
			<-done
		})
		refuseAll(b, gl.Addr().String())
	})
	b.Run("direct", func(b *testing.B) {
		l := listenB(b)
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				reset(c)
			}
		}()
		refuseAll(b, l.Addr().String())
	})
}

// BenchmarkRefusedQuery: what a sandbox at its MaxQueries costs the
// resolver per further UDP query (read, parse, lookup, REFUSED from the
// reading loop), as a round trip, b.N times.
func BenchmarkRefusedQuery(b *testing.B) {
	reg := NewRegistry(RegistryConfig{}, nil)
	reg.Add(sandboxID, sandboxAddr, MustParse("*.example.test"), Policy{})
	if _, _, ok := reg.admit(sandboxAddr, slotQuery, 1); !ok {
		b.Fatal("no slot")
	}
	r := NewResolver(ResolverConfig{Static: testStatic, MaxQueries: 1}, reg, nil)
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Serve(ctx, pc, nil) }()
	b.Cleanup(func() {
		cancel()
		<-done
	})
	c, err := net.Dial("udp", pc.LocalAddr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	q, _ := new(dns.Msg).SetQuestion("api.example.test.", dns.TypeA).Pack()
	buf := make([]byte, 512)
	b.ResetTimer()
	for range b.N {
		if _, err := c.Write(q); err != nil {
			b.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(10 * time.Second)) // a guard
		n, err := c.Read(buf)
		if err != nil {
			b.Fatal(err)
		}
		m := new(dns.Msg)
		if err := m.Unpack(buf[:n]); err != nil || m.Rcode != dns.RcodeRefused {
			b.Fatalf("answer %v %v, want REFUSED", m, err)
		}
	}
}
