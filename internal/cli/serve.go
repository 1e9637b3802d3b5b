package cli

import (
	"fmt"
	"log/slog"
	"net/netip"
	"strings"

	"github.com/spf13/cobra"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/service"
)

func (a *app) serveCmd() *cobra.Command {
	var (
		cfg       service.Config
		logLevel  string
		cpus      float64
		memory    int64
		disk      int64
		noNetwork bool
		subnet    string
		static    []string
	)
	cfg.BuildManaged = true
	c := &cobra.Command{
		Use:   "serve",
		Short: "Run the whole cove service on this host",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var level slog.Level
			if err := level.UnmarshalText([]byte(logLevel)); err != nil {
				return fmt.Errorf("--log-level %q: use debug, info, warn or error", logLevel)
			}
			log := slog.New(slog.NewJSONHandler(a.env.Stderr, &slog.HandlerOptions{Level: level}))
			cfg.Network.Disabled = noNetwork
			if subnet != "" {
				p, err := netip.ParsePrefix(subnet)
				if err != nil {
					return fmt.Errorf("--subnet %q: %v", subnet, err)
				}
				cfg.Network.Subnet = p
			}
			var err error
			if cfg.Network.Static, err = staticNames(static); err != nil {
				return err
			}
			if cpus > 0 || memory > 0 || disk > 0 {
				cfg.Server.MaxResources = api.Resources{CPUs: cpus, MemoryMiB: memory, DiskMiB: disk}
			}
			return service.Run(cmd.Context(), cfg, log, a.env.Stderr, func(key string) {
				if key == "" {
					return
				}
				a.announceKey(cfg, key)
			})
		},
	}
	f := c.Flags()
	f.StringVar(&cfg.Listen, "listen", "127.0.0.1:7070", "API address")
	f.StringVar(&cfg.DataDir, "data-dir", "/var/lib/cove", "data directory")
	f.StringVar(&cfg.ImagesDir, "images-dir", "", "images directory (default <data-dir>/images)")
	f.BoolVar(&cfg.BuildManaged, "build-managed", true, "build the managed image if it is missing")
	f.StringVar(&cfg.DefaultTemplate, "default-template", "managed", "template of sandboxes that name none")
	f.StringVar(&cfg.AgentPath, "agent", "", "cove-agent binary (default: beside this executable)")
	f.StringVar(&cfg.RuncPath, "runc", "runc", "OCI runtime binary")
	f.StringVar(&cfg.CgroupParent, "cgroup-parent", "/cove", "cgroup holding every sandbox's cgroup")
	f.Int64Var(&cfg.OutputMaxBytes, "output-max-bytes", 4<<30, "recorded output kept per command")
	f.Float64Var(&cpus, "max-cpus", 0, "most CPUs one sandbox may reserve (default 2)")
	f.Int64Var(&memory, "max-memory-mib", 0, "most memory one sandbox may reserve (default 8192)")
	f.Int64Var(&disk, "max-disk-mib", 0, "most disk one sandbox may reserve (default 20480)")
	f.Int64Var(&cfg.Server.PidsLimit, "pids-limit", 1024, "most processes and threads in one sandbox")
	f.IntVar(&cfg.Server.WarmPool, "warm-pool", 1, "ready sandboxes of the default template kept to hand out at once (0: none)")
	f.BoolVar(&noNetwork, "no-network", false, "no fence, resolver or gateway: sandboxes get loopback only")
	f.StringVar(&subnet, "subnet", "10.88.0.0/16", "subnet carved into one /30 per sandbox")
	f.StringVar(&cfg.Network.Table, "nft-table", "cove", "nftables table (inet) of the fence")
	f.Uint16Var(&cfg.Network.GatewayPort, "gateway-port", 15001, "port of the egress gateway")
	f.Uint16Var(&cfg.Network.DNSPort, "dns-port", 15353, "port of the sandboxes' resolver")
	f.StringArrayVar(&static, "dns-static", nil, "a name the resolver answers itself, NAME=IP[,IP] (repeatable)")
	f.StringVar(&cfg.Network.Upstream, "dns-upstream", "auto", "upstream resolver host:port; auto reads /etc/resolv.conf; none forwards nothing")
	f.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	return c
}

// announceKey prints the admin key once and writes the CLI config of the
// user who ran the server.
func (a *app) announceKey(cfg service.Config, key string) {
	url := "http://" + cfg.Listen
	if strings.HasPrefix(cfg.Listen, ":") {
		url = "http://127.0.0.1" + cfg.Listen
	}
	fmt.Fprintf(a.env.Stderr, "\nadmin API key (shown once; also in %s/admin-api-key):\n  %s\n\n", cfg.DataDir, key)
	if home := a.env.Getenv("HOME"); home != "" {
		if err := WriteConfig(home, Config{URL: url, APIKey: key}); err != nil {
			fmt.Fprintf(a.env.Stderr, "cove: could not write the CLI config: %v\n", err)
			return
		}
		fmt.Fprintf(a.env.Stderr, "the cove CLI is configured in %s\n", ConfigPath(home))
	}
}

// staticNames parses NAME=IP[,IP] flags.
func staticNames(flags []string) (map[string][]netip.Addr, error) {
	m := map[string][]netip.Addr{}
	for _, f := range flags {
		name, ips, ok := strings.Cut(f, "=")
		if !ok || name == "" {
			return nil, fmt.Errorf("--dns-static %q: want NAME=IP[,IP]", f)
		}
		for _, s := range strings.Split(ips, ",") {
			a, err := netip.ParseAddr(s)
			if err != nil {
				return nil, fmt.Errorf("--dns-static %q: %v", f, err)
			}
			m[strings.ToLower(strings.TrimSuffix(name, "."))] = append(m[strings.ToLower(strings.TrimSuffix(name, "."))], a)
		}
	}
	return m, nil
}
