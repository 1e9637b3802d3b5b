package cli

import (
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/cove-dev/cove/api"
)

// snapshotCmd is `cove snapshot`: make, list, show, delete snapshots and
// return a sandbox to one.
func (a *app) snapshotCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "snapshot",
		Short: "Freeze sandboxes' files into snapshots, start on them, return to them",
	}
	create := &cobra.Command{
		Use:   "create REF NAME",
		Short: "Freeze a running or asleep sandbox's files into a snapshot (its commands go on)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := a.client()
			if err != nil {
				return err
			}
			s, err := cl.CreateSnapshot(cmd.Context(), args[0], args[1])
			if err != nil {
				return err
			}
			if a.json {
				return a.printJSON(s)
			}
			fmt.Fprintf(a.env.Stdout, "%s %s %d\n", s.ID, s.Name, s.SizeBytes)
			return nil
		},
	}
	a.jsonFlag(create)
	var sandbox string
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List the team's snapshots",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := a.client()
			if err != nil {
				return err
			}
			items, err := listAll(func(cursor string) (api.List[api.Snapshot], error) {
				return cl.ListSnapshots(cmd.Context(), sandbox, 1000, cursor)
			})
			if err != nil {
				return err
			}
			return printList(a, items, "ID\tNAME\tSANDBOX\tSIZE\tCREATED", func(s api.Snapshot) string {
				return fmt.Sprintf("%s\t%s\t%s\t%d\t%s", s.ID, s.Name, s.SandboxID, s.SizeBytes, s.CreatedAt.Format(time.RFC3339))
			})
		},
	}
	ls.Flags().StringVar(&sandbox, "sandbox", "", "only the snapshots of this sandbox")
	a.jsonFlag(ls)
	get := &cobra.Command{
		Use:   "get SNAPSHOT",
		Short: "Show a snapshot (by ID or name)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := a.client()
			if err != nil {
				return err
			}
			s, err := cl.GetSnapshot(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return a.printJSON(s)
		},
	}
	rm := &cobra.Command{
		Use:   "rm SNAPSHOT...",
		Short: "Delete snapshots no sandbox stands on",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := a.client()
			if err != nil {
				return err
			}
			for _, ref := range args {
				if err := cl.DeleteSnapshot(cmd.Context(), ref); err != nil {
					return err
				}
				fmt.Fprintf(a.env.Stdout, "%s deleted\n", ref)
			}
			return nil
		},
	}
	restore := &cobra.Command{
		Use:   "restore REF SNAPSHOT",
		Short: "Return a sandbox to a snapshot: running commands end; ID, name, network and history stay",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := a.client()
			if err != nil {
				return err
			}
			sb, err := cl.RestoreSandbox(cmd.Context(), args[0], args[1], true)
			if err != nil {
				return err
			}
			if a.json {
				return a.printJSON(sb)
			}
			fmt.Fprintf(a.env.Stdout, "%s %s\n", sb.ID, sb.State)
			return nil
		},
	}
	a.jsonFlag(restore)
	root.AddCommand(create, ls, get, rm, restore)
	return root
}

// forkCmd is `cove fork REF`: count new sandboxes from a sandbox's files.
func (a *app) forkCmd() *cobra.Command {
	var (
		count  int
		names  string
		labels []string
		wait   bool
	)
	c := &cobra.Command{
		Use:   "fork REF",
		Short: "Make new sandboxes from a sandbox's files as they are now (each independent)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := api.ForkSandboxRequest{Count: count}
			if names != "" {
				req.Names = strings.Split(names, ",")
			}
			for _, l := range labels {
				k, v, ok := strings.Cut(l, "=")
				if !ok || k == "" {
					return usageError{fmt.Errorf("--label %q: want KEY=VALUE", l)}
				}
				if req.Labels == nil {
					req.Labels = map[string]string{}
				}
				req.Labels[k] = v
			}
			cl, err := a.client()
			if err != nil {
				return err
			}
			items, err := cl.ForkSandbox(cmd.Context(), args[0], req, wait)
			if err != nil {
				return err
			}
			if a.json {
				return a.printJSON(api.ForkResult{Items: items})
			}
			for _, sb := range items {
				fmt.Fprintf(a.env.Stdout, "%s %s\n", sb.ID, sb.State)
			}
			return nil
		},
	}
	c.Flags().IntVarP(&count, "count", "n", 1, "how many sandboxes to make")
	c.Flags().StringVar(&names, "names", "", "comma-separated names of the new sandboxes, one per sandbox")
	c.Flags().StringArrayVar(&labels, "label", nil, "KEY=VALUE label of every new sandbox (default the parent's); repeatable")
	c.Flags().BoolVar(&wait, "wait", true, "answer once they all run")
	a.jsonFlag(c)
	return c
}

// listAll gathers every page of a list, 1000 items a page.
func listAll[T any](page func(cursor string) (api.List[T], error)) ([]T, error) {
	items := []T{}
	cursor := ""
	for {
		l, err := page(cursor)
		if err != nil {
			return nil, err
		}
		items = append(items, l.Items...)
		if cursor = l.NextCursor; cursor == "" {
			return items, nil
		}
	}
}

// printList prints items as one JSON list under --json, else as a table:
// head, then a row per item, columns tab-separated and aligned.
func printList[T any](a *app, items []T, head string, row func(T) string) error {
	if a.json {
		return a.printJSON(api.List[T]{Items: items})
	}
	tw := tabwriter.NewWriter(a.env.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, head)
	for _, it := range items {
		fmt.Fprintln(tw, row(it))
	}
	return tw.Flush()
}
