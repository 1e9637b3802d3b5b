package cli

import (
	"errors"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

// nodesCmd is `cove nodes`: a fleet's nodes, for the admin key.
func (a *app) nodesCmd() *cobra.Command {
	nodes := &cobra.Command{Use: "nodes", Short: "List and manage a fleet's nodes (admin key; `cove control` only)"}
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List the nodes: state, address, capacity and what is reserved of it",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := a.client()
			if err != nil {
				return err
			}
			ns, err := cl.ListNodes(cmd.Context())
			if err != nil {
				return err
			}
			if a.json {
				return a.printJSON(ns)
			}
			tw := tabwriter.NewWriter(a.env.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tNAME\tSTATE\tADDR\tCPUS\tMEMORY\tSANDBOXES")
			for _, n := range ns {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%g/%g\t%d/%d MiB\t%d\n", n.ID, n.Name, n.State, n.Addr,
					n.Reserved.CPUs, n.Capacity.CPUs, n.Reserved.MemoryMiB, n.Capacity.MemoryMiB, n.Sandboxes)
			}
			return tw.Flush()
		},
	}
	a.jsonFlag(ls)
	drain := &cobra.Command{
		Use:   "drain REF",
		Short: "Stop placing new sandboxes on a node (by ID or name); what runs there stays",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := a.client()
			if err != nil {
				return err
			}
			n, err := cl.DrainNode(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			fmt.Fprintf(a.env.Stdout, "node %s (%s) is %s\n", n.Name, n.ID, n.State)
			return nil
		},
	}
	undrain := &cobra.Command{
		Use:   "undrain REF",
		Short: "Let a drained node take new sandboxes again",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := a.client()
			if err != nil {
				return err
			}
			n, err := cl.UndrainNode(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			fmt.Fprintf(a.env.Stdout, "node %s (%s) is %s\n", n.Name, n.ID, n.State)
			return nil
		},
	}
	rm := &cobra.Command{
		Use:   "rm REF",
		Short: "Remove a node: its certificate is refused and its sandboxes go asleep (from their save) or fail",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := a.client()
			if err != nil {
				return err
			}
			if err := cl.RemoveNode(cmd.Context(), args[0]); err != nil {
				return err
			}
			fmt.Fprintf(a.env.Stdout, "node %s removed\n", args[0])
			return nil
		},
	}
	var rotate bool
	token := &cobra.Command{
		Use:   "token --rotate",
		Short: "Make a new join token for `cove node` to join with (shown once); the previous one stops working",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !rotate {
				return errors.New("the join token is shown only when it is made: pass --rotate to make a new one (the previous one stops working)")
			}
			cl, err := a.client()
			if err != nil {
				return err
			}
			t, err := cl.RotateJoinToken(cmd.Context())
			if err != nil {
				return err
			}
			if a.json {
				return a.printJSON(t)
			}
			fmt.Fprintf(a.env.Stdout, "%s\nexpires %s\n", t.Token, t.ExpiresAt.Local().Format("2006-01-02 15:04:05 MST"))
			return nil
		},
	}
	token.Flags().BoolVar(&rotate, "rotate", false, "make a new token")
	a.jsonFlag(token)
	nodes.AddCommand(ls, drain, undrain, rm, token)
	return nodes
}
