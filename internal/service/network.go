package service

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"

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
	// DNS. Defaults 15001 and 15353.
	GatewayPort, DNSPort uint16
	// Static names the resolver answers itself: name → addresses.
	Static map[string][]netip.Addr
	// Upstream is the resolver's upstream (host:port); "auto" takes the
	// first nameserver of /etc/resolv.conf; "" forwards nothing.
	Upstream string
}

// startNetwork builds the fence and starts the resolver and the gateway.
// They serve until ctx is done; wait for wg after cancelling.
func startNetwork(ctx context.Context, wg *sync.WaitGroup, cfg NetworkConfig, dataDir string, denied func(string, api.NetworkObservation), log *slog.Logger) (*network.Manager, error) {
	if cfg.GatewayPort == 0 {
		cfg.GatewayPort = 15001
	}
	if cfg.DNSPort == 0 {
		cfg.DNSPort = 15353
	}
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
		OnDenied: func(id string, o netpolicy.Observation) { denied(id, api.NetworkObservation(o)) },
	}, log)
	mgr, err := network.NewManager(fence, reg, filepath.Join(dataDir, "net", "resolv"))
	if err != nil {
		return nil, err
	}
	resolver := netpolicy.NewResolver(netpolicy.ResolverConfig{Static: cfg.Static, Upstream: cfg.Upstream}, reg, log)
	gateway := netpolicy.NewGateway(netpolicy.GatewayConfig{Trusted: resolver.Static}, reg, resolver.Lookup, log)

	dnsAddr := fmt.Sprintf("0.0.0.0:%d", cfg.DNSPort)
	pc, err := net.ListenPacket("udp4", dnsAddr)
	if err != nil {
		return nil, fmt.Errorf("resolver: %w", err)
	}
	dl, err := net.Listen("tcp4", dnsAddr)
	if err != nil {
		pc.Close()
		return nil, fmt.Errorf("resolver: %w", err)
	}
	gl, err := net.Listen("tcp4", fmt.Sprintf("0.0.0.0:%d", cfg.GatewayPort))
	if err != nil {
		pc.Close()
		dl.Close()
		return nil, fmt.Errorf("gateway: %w", err)
	}
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
	log.Info("network fence up", "table", cfg.Table, "gateway_port", cfg.GatewayPort, "dns_port", cfg.DNSPort, "upstream", cfg.Upstream)
	return mgr, nil
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
