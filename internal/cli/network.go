package cli

import (
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/cove-dev/cove/api"
)

func (a *app) networkCmd() *cobra.Command {
	var allow []string
	c := &cobra.Command{
		Use:   "network REF",
		Short: "Show what a sandbox may reach and what it tried to; --allow changes it",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := a.client()
			if err != nil {
				return err
			}
			if cmd.Flags().Changed("allow") {
				if len(allow) == 1 && allow[0] == "" {
					allow = []string{}
				}
				if _, err := cl.UpdateSandbox(cmd.Context(), args[0], api.UpdateSandboxRequest{Network: &api.NetworkPolicy{Allow: allow}}); err != nil {
					return err
				}
			}
			v, err := cl.Network(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if a.json {
				return a.printJSON(v)
			}
			policy := strings.Join(v.Policy.Allow, ", ")
			if policy == "" {
				policy = "(nothing: all traffic is denied)"
			}
			fmt.Fprintf(a.env.Stdout, "allow: %s\n\n", policy)
			tw := tabwriter.NewWriter(a.env.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "DESTINATION\tPORT\tDECISION\tCOUNT\tBYTES OUT\tBYTES IN\tLAST SEEN")
			for _, o := range v.Observations {
				decision := o.Decision
				if o.Reason != "" { // a limit of the node's, not the policy
					decision += " (" + o.Reason + ")"
				}
				fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%d\t%d\t%s\n", o.Destination, o.Port, decision, o.Count, o.BytesOut, o.BytesIn, ago(o.LastSeen))
			}
			return tw.Flush()
		},
	}
	c.Flags().StringSliceVar(&allow, "allow", nil, "replace the policy: host, *.suffix, host:port, CIDR[:port] (comma-separated; \"\" denies all)")
	a.jsonFlag(c)
	return c
}
