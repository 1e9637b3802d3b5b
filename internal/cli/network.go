package cli

import (
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/cove-dev/cove/api"
)

func (a *app) networkCmd() *cobra.Command {
	var allow, inject []string
	c := &cobra.Command{
		Use:   "network REF",
		Short: "Show what a sandbox may reach and what it tried to; --allow changes it",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := a.client()
			if err != nil {
				return err
			}
			if cmd.Flags().Changed("allow") || cmd.Flags().Changed("inject") {
				if !cmd.Flags().Changed("allow") {
					sb, err := cl.GetSandbox(cmd.Context(), args[0])
					if err != nil {
						return err
					}
					allow = sb.Network.Allow
				}
				if len(allow) == 1 && allow[0] == "" {
					allow = []string{}
				}
				p := &api.NetworkPolicy{Allow: allow}
				if cmd.Flags().Changed("inject") {
					p.Inject = []api.InjectRule{}
					if !(len(inject) == 1 && inject[0] == "") {
						if p.Inject, err = injectRules(inject); err != nil {
							return err
						}
					}
				}
				if _, err := cl.UpdateSandbox(cmd.Context(), args[0], api.UpdateSandboxRequest{Network: p}); err != nil {
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
			fmt.Fprintf(a.env.Stdout, "allow: %s\n", policy)
			for _, r := range v.Policy.Inject {
				dest := r.Host
				if r.Port != 0 {
					dest += ":" + strconv.Itoa(r.Port)
				}
				// The rule as given: it names secrets, never holds a value.
				fmt.Fprintf(a.env.Stdout, "inject: %s%s %s: %s\n", dest, r.PathPrefix, r.Header, r.Value)
			}
			fmt.Fprintln(a.env.Stdout)
			tw := tabwriter.NewWriter(a.env.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "DESTINATION\tPORT\tDECISION\tCOUNT\tINJECTED\tBYTES OUT\tBYTES IN\tLAST SEEN")
			for _, o := range v.Observations {
				decision := o.Decision
				if o.Reason != "" { // a limit of the node's, not the policy
					decision += " (" + o.Reason + ")"
				}
				injected := "-"
				if o.Injected > 0 || o.LastStatus != 0 {
					injected = fmt.Sprintf("%d (last %d)", o.Injected, o.LastStatus)
				}
				fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%s\t%d\t%d\t%s\n", o.Destination, o.Port, decision, o.Count, injected, o.BytesOut, o.BytesIn, ago(o.LastSeen))
			}
			return tw.Flush()
		},
	}
	c.Flags().StringArrayVar(&inject, "inject", nil, "replace the injection rules: 'HOST[:PORT][/PATH_PREFIX]=HEADER: VALUE' with {secret:NAME} in VALUE (repeatable; \"\" removes them)")
	c.Flags().StringSliceVar(&allow, "allow", nil, "replace the policy: host, *.suffix, host:port, CIDR[:port] (comma-separated; \"\" denies all)")
	a.jsonFlag(c)
	return c
}
