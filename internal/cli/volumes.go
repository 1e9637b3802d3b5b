package cli

import (
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/cove-dev/cove/api"
)

// volumeCmd is `cove volume`: make, list, show and delete the team's
// volumes (sandboxes mount them with `cove create --volume`).
func (a *app) volumeCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "volume",
		Short: "Team volumes: disks that outlive sandboxes, mounted by several at once (cove create --volume)",
	}
	var sizeMiB int64
	create := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a volume of --size-mib MiB (its quota, charged as storage)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := a.client()
			if err != nil {
				return err
			}
			v, err := cl.CreateVolume(cmd.Context(), args[0], sizeMiB)
			if err != nil {
				return err
			}
			if a.json {
				return a.printJSON(v)
			}
			fmt.Fprintf(a.env.Stdout, "%s %s %d\n", v.ID, v.Name, v.SizeMiB)
			return nil
		},
	}
	create.Flags().Int64Var(&sizeMiB, "size-mib", 1024, "the volume's size in MiB (at least 16)")
	a.jsonFlag(create)
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List the team's volumes",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := a.client()
			if err != nil {
				return err
			}
			items := []api.Volume{}
			cursor := ""
			for {
				l, err := cl.ListVolumes(cmd.Context(), 1000, cursor)
				if err != nil {
					return err
				}
				items = append(items, l.Items...)
				if cursor = l.NextCursor; cursor == "" {
					break
				}
			}
			if a.json {
				return a.printJSON(api.List[api.Volume]{Items: items})
			}
			tw := tabwriter.NewWriter(a.env.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tNAME\tSIZE_MIB\tUSED_BYTES\tSANDBOXES\tCREATED")
			for _, v := range items {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\n", v.ID, v.Name, v.SizeMiB, v.UsedBytes, strings.Join(v.Sandboxes, ","), v.CreatedAt.Format(time.RFC3339))
			}
			return tw.Flush()
		},
	}
	a.jsonFlag(ls)
	get := &cobra.Command{
		Use:   "get VOLUME",
		Short: "Show a volume (by ID or name) and the sandboxes that mount it",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := a.client()
			if err != nil {
				return err
			}
			v, err := cl.GetVolume(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return a.printJSON(v)
		},
	}
	rm := &cobra.Command{
		Use:   "rm VOLUME...",
		Short: "Delete volumes and their files; one a sandbox still mounts is refused",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := a.client()
			if err != nil {
				return err
			}
			for _, ref := range args {
				if err := cl.DeleteVolume(cmd.Context(), ref); err != nil {
					return err
				}
				fmt.Fprintf(a.env.Stdout, "%s deleted\n", ref)
			}
			return nil
		},
	}
	root.AddCommand(create, ls, get, rm)
	return root
}

// volumeMounts reads `--volume NAME:PATH[:ro]` flags.
func volumeMounts(flags []string) ([]api.VolumeMount, error) {
	var out []api.VolumeMount
	for _, f := range flags {
		parts := strings.Split(f, ":")
		if len(parts) < 2 || len(parts) > 3 || parts[0] == "" || parts[1] == "" || (len(parts) == 3 && parts[2] != "ro") {
			return nil, fmt.Errorf("--volume %q: want NAME:PATH or NAME:PATH:ro", f)
		}
		out = append(out, api.VolumeMount{Name: parts[0], Path: parts[1], ReadOnly: len(parts) == 3})
	}
	return out, nil
}
