//go:build !linux

package cli

import (
	"errors"

	"github.com/spf13/cobra"
)

// serverCmds: the service runs sandboxes with runc, netlink and nftables,
// so off Linux `cove serve` only says so; the client commands work.
func (a *app) serverCmds() []*cobra.Command {
	return []*cobra.Command{{
		Use:                "serve",
		Short:              "Run the whole cove service on this host (Linux only)",
		DisableFlagParsing: true,
		RunE: func(*cobra.Command, []string) error {
			return errors.New("cove serve runs on Linux only (sandboxes are runc containers); point this CLI at a Linux host with --url or COVE_URL")
		},
	}}
}
