//go:build !linux

package cli

import (
	"errors"

	"github.com/spf13/cobra"
)

// serverCmds: the service runs sandboxes with runc, netlink and nftables,
// so off Linux `cove serve` only says so; the client commands work.
func (a *app) serverCmds() []*cobra.Command {
	var cmds []*cobra.Command
	for _, c := range []struct{ use, short string }{
		{"serve", "Run the whole cove service on this host (Linux only)"},
		{"control", "Run the control plane alone (Linux only)"},
		{"node", "Run a node for a control plane (Linux only)"},
	} {
		cmds = append(cmds, &cobra.Command{
			Use:                c.use,
			Short:              c.short,
			DisableFlagParsing: true,
			RunE: func(*cobra.Command, []string) error {
				return errors.New("cove " + c.use + " runs on Linux only (sandboxes are runc containers); point this CLI at a Linux host with --url or COVE_URL")
			},
		})
	}
	return cmds
}
