package cli

import (
	"fmt"
	"log/slog"
	"strings"

	"github.com/spf13/cobra"

	"cove/api"
	"cove/internal/service"
)

func (a *app) serveCmd() *cobra.Command {
	var (
		cfg      service.Config
		logLevel string
		cpus     float64
		memory   int64
		disk     int64
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
