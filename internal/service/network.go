package service

import (
	"bufio"
	"context"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/netpolicy"
	"github.com/cove-dev/cove/internal/node/network"
)

// NetworkConfig configures the node's fence, resolver and gateway.
type NetworkConfig struct {
	// Disabled leaves sandboxes with loopback only (no fence, no gateway).
	Disabled bool
	// Subnet is carved into one /30 per sandbox. Default 10.88.0.0/16.
	Subnet netip.Prefix
	// Table is the nftables table (inet family). Default "cove".
	Table string
	// GatewayPort and DNSPort are where the fence sends sandboxes' TCP and
	// DNS (the resolver takes UDP and TCP on DNSPort). 0 takes a free port;
	// the fence is written with the ports bound. Defaults 15001 and 15353.
	GatewayPort, DNSPort uint16
	// Static names the resolver answers itself: name → addresses.
	Static map[string][]netip.Addr
	// Upstream is the resolver's upstream (host:port); "auto" takes the
	// first nameserver of /etc/resolv.conf; "" or "none" forwards nothing.
	// Default "auto".
	Upstream string
	// MaxConns bounds one sandbox's connections open through the gateway
	// at once; past it a connection is reset and counted as a denial
	// (connection_limit). Default 512.
	MaxConns int
	// MaxDNSQueries bounds one sandbox's DNS queries in flight (a TCP
	// connection to the resolver holds one while open); past it a query
	// gets REFUSED and is counted as a denial (dns_limit). Default 128.
	MaxDNSQueries int
	// DeniedPerSecond bounds one sandbox's network.denied events a second;
	// the next event counts those held back (suppressed). Default 10.
	DeniedPerSecond float64
	// HalfCloseTimeout bounds how long a relayed connection lives once one
	// side has ended its half while the other sends nothing (a destination
	// that never answers or closes): then the gateway closes it, and its
	// descriptors and the sandbox's slot are free. Default 1 minute.
	HalfCloseTimeout time.Duration
}

// startNetwork binds the resolver and the gateway, installs the fence that
// sends sandboxes to the ports they bound, and starts serving; the bound
// addresses go into listeners as "dns" and "gateway". They serve until ctx
// is done; wait for wg after cancelling.
//
// owners names the commands holding sandbox sockets (the node's agents); it
// may answer an error until the node exists.
func startNetwork(ctx context.Context, wg *sync.WaitGroup, cfg NetworkConfig, dataDir string, denied func(string, api.NetworkObservation, int64), injected func(string, netpolicy.InjectEvent), operatorCAs []byte, owners func(context.Context, string, []netpolicy.Socket) ([]string, error), counters netpolicy.Counters, listeners Listeners, log *slog.Logger) (_ *network.Manager, err error) {
	pc, dl, err := listenDNS(cfg.DNSPort)
	if err != nil {
		return nil, fmt.Errorf("resolver: %w", err)
	}
	gl, err := net.Listen("tcp4", fmt.Sprintf("0.0.0.0:%d", cfg.GatewayPort))
	if err != nil {
		pc.Close()
		dl.Close()
		return nil, fmt.Errorf("gateway: %w", err)
	}
	defer func() {
		if err != nil {
			pc.Close()
			dl.Close()
			gl.Close()
		}
	}()
	cfg.DNSPort = uint16(dl.Addr().(*net.TCPAddr).Port)
	cfg.GatewayPort = uint16(gl.Addr().(*net.TCPAddr).Port)

	switch cfg.Upstream {
	case "auto":
		cfg.Upstream = systemResolver()
	case "none":
		cfg.Upstream = ""
	}
	fence, err := network.New(network.Config{
		Dir: filepath.Join(dataDir, "net", "links"), Subnet: cfg.Subnet, Table: cfg.Table,
		GatewayPort: cfg.GatewayPort, DNSPort: cfg.DNSPort,
	}, log)
	if err != nil {
		return nil, err
	}
	if err := fence.Init(ctx); err != nil {
		return nil, fmt.Errorf("install the network fence: %w", err)
	}
	reg := netpolicy.NewRegistry(netpolicy.RegistryConfig{
		DeniedPerSecond: cfg.DeniedPerSecond,
		OnDenied: func(id string, d netpolicy.Denial) {
			denied(id, api.NetworkObservation(d.Observation), d.Suppressed)
		},
		Owners:     owners,
		Counters:   counters,
		OnInjected: injected,
	}, log)
	mgr, err := network.NewManager(fence, reg, filepath.Join(dataDir, "net", "resolv"))
	if err != nil {
		return nil, err
	}
	resolver := netpolicy.NewResolver(netpolicy.ResolverConfig{
		Static: cfg.Static, Upstream: cfg.Upstream, MaxQueries: cfg.MaxDNSQueries,
	}, reg, log)
	// Whatever a policy says, the gateway never dials the node: its own
	// addresses (asked of the kernel at each connection), loopback, and the
	// sandboxes' subnet (other sandboxes and the host sides of their veths).
	// Destinations the gateway adds credentials to are verified against
	// the host's trust store and the operator's CAs.
	roots, err := x509.SystemCertPool()
	if err != nil {
		roots = x509.NewCertPool()
	}
	if len(operatorCAs) > 0 && !roots.AppendCertsFromPEM(operatorCAs) {
		return nil, fmt.Errorf("operator CA certificates: none could be parsed")
	}
	gateway := netpolicy.NewGateway(netpolicy.GatewayConfig{
		UpstreamRoots:  roots,
		Trusted:        resolver.Static,
		Refused:        []netip.Prefix{fence.Subnet()},
		MaxConns:       cfg.MaxConns,
		HalfClosedIdle: cfg.HalfCloseTimeout,
	}, reg, resolver.Lookup, log)

	listeners["dns"] = dl.Addr().String()
	listeners["gateway"] = gl.Addr().String()
	wg.Go(func() {
		if err := resolver.Serve(ctx, pc, dl); err != nil {
			log.Error("resolver stopped", "err", err)
		}
	})
	wg.Go(func() {
		if err := gateway.Serve(ctx, gl); err != nil {
			log.Error("gateway stopped", "err", err)
		}
	})
	wg.Go(func() { reg.Run(ctx) })
	wg.Go(func() { reg.RunOwners(ctx) })
	log.Info("network fence up", "table", cfg.Table, "gateway_port", cfg.GatewayPort, "dns_port", cfg.DNSPort, "upstream", cfg.Upstream,
		"sandbox_max_connections", cfg.MaxConns, "sandbox_max_dns_queries", cfg.MaxDNSQueries, "sandbox_denied_events_per_second", cfg.DeniedPerSecond, "gateway_half_close_timeout", cfg.HalfCloseTimeout)
	return mgr, nil
}

// listenDNS binds the resolver's UDP and TCP sockets on one port. Port 0
// takes a free TCP port and the same UDP port, and tries again while that
// UDP port is taken.
func listenDNS(port uint16) (net.PacketConn, net.Listener, error) {
	for attempt := 0; ; attempt++ {
		l, err := net.Listen("tcp4", fmt.Sprintf("0.0.0.0:%d", port))
		if err != nil {
			return nil, nil, err
		}
		pc, err := net.ListenPacket("udp4", fmt.Sprintf("0.0.0.0:%d", l.Addr().(*net.TCPAddr).Port))
		if err == nil {
			return pc, l, nil
		}
		l.Close()
		if port != 0 || attempt == 20 {
			return nil, nil, err
		}
	}
}

// systemResolver is the first nameserver of /etc/resolv.conf as host:53.
func systemResolver() string {
	f, err := os.Open("/etc/resolv.conf")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) >= 2 && fields[0] == "nameserver" {
			return net.JoinHostPort(fields[1], "53")
		}
	}
	return ""
}
