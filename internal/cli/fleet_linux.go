package cli

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/spf13/cobra"

	"github.com/cove-dev/cove/internal/control/fleet"
	"github.com/cove-dev/cove/internal/service"
)

// logger is the JSON log of a server process at the level flag asks.
func (a *app) logger(level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: use debug, info, warn or error", level)
	}
	return slog.New(slog.NewJSONHandler(a.env.Stderr, &slog.HandlerOptions{Level: l})), nil
}

func (a *app) controlCmd() *cobra.Command {
	var o serveFlags
	var cc service.ControlConfig
	c := &cobra.Command{
		Use:   "control",
		Short: "Run the control plane alone: the API and console, and a listener where nodes join",
		Long: "Run the control plane alone, with no node of its own: the API, console, store, placement,\n" +
			"metering, events and webhooks, and a TLS listener (--node-listen) where `cove node` processes\n" +
			"join with the token written to <data-dir>/join-token. docs/fleet.md says how to run a fleet.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := a.logger(o.logLevel)
			if err != nil {
				return err
			}
			if cc.Config, err = o.config(); err != nil {
				return err
			}
			return service.RunControl(cmd.Context(), cc, log, a.env.Stderr, func(st service.Started) {
				if st.AdminKey != "" {
					a.announceKey(cc.Config, st.Listeners["api"], st.AdminKey)
				}
			})
		},
	}
	o.bindProcess(c)
	o.bindPlane(c)
	f := c.Flags()
	f.StringVar(&cc.NodeListen, "node-listen", "127.0.0.1:7071", "TLS listener for nodes only: joins, heartbeats, certificate renewals (port 0: a free port)")
	f.DurationVar(&cc.JoinTokenTTL, "join-token-ttl", 24*time.Hour, "life of a generated join token")
	f.StringVar(&cc.JoinTokenFile, "join-token-file", "", "a join token the operator supplies (a file, mode 0600) instead of a generated one")
	f.DurationVar(&cc.NodeLostAfter, "node-lost-after", fleet.DefaultLostAfter, "a node silent this long (on this clock) is lost: its sandboxes with a save go asleep, the others fail")
	f.Float64Var(&cc.CPUOvercommit, "cpu-overcommit", 8, "placement counts each node's CPUs times this (a sandbox's CPUs are a limit; most sandboxes idle)")
	f.Float64Var(&cc.MemoryOvercommit, "memory-overcommit", 2, "placement counts each node's memory times this")
	return c
}

func (a *app) nodeCmd() *cobra.Command {
	var o serveFlags
	var nc service.NodeConfig
	c := &cobra.Command{
		Use:   "node",
		Short: "Run a node: the sandboxes of this host, for a control plane it joins",
		Long: "Run the node side alone: runtime, images, fence, gateway, resolver, recorded output and saves.\n" +
			"It joins the control plane at --control with the token in --join-token-file, then serves its\n" +
			"node API (--listen) to the control plane only. docs/fleet.md says how to run a fleet.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := a.logger(o.logLevel)
			if err != nil {
				return err
			}
			if nc.Config, err = o.config(); err != nil {
				return err
			}
			nc.Version = version
			return service.RunNode(cmd.Context(), nc, log, a.env.Stderr, nil)
		},
	}
	o.bindProcess(c)
	o.bindNode(c)
	f := c.Flags()
	f.Lookup("listen").DefValue = "127.0.0.1:7072"
	f.Set("listen", "127.0.0.1:7072")
	f.Lookup("listen").Usage = "node API address, served to the control plane only over mutual TLS (port 0: a free port)"
	f.StringSliceVar(&nc.Controls, "control", nil, "the control plane's node listeners, https://HOST:PORT (several, comma-separated, fail over)")
	f.StringVar(&nc.JoinTokenFile, "join-token-file", "", "file holding the join token (read at the first join only; never pass a token on the command line)")
	f.StringVar(&nc.Name, "name", "", "the node's name in the fleet (default: the host name)")
	f.StringVar(&nc.Advertise, "advertise", "", "the node API's address the control plane dials (default: the address --listen bound)")
	f.Float64Var(&nc.CPUs, "cpus", 0, "CPUs this node offers (default: the host's)")
	f.Int64Var(&nc.MemoryMiB, "memory-mib", 0, "memory this node offers, in MiB (default: the host's)")
	return c
}
