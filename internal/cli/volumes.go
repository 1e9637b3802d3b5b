package cli

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cove-dev/cove/api"
)

// volumeCmd is `cove volume`: make, list, show and delete the team's
// volumes; `cove create --volume` mounts them.
func (a *app) volumeCmd() *cobra.Command {
	root := &cobra.Command{
		Use:     "volume",
		Aliases: []string{"volumes"},
		Short:   "Disks of the team that outlive sandboxes, mounted by several at once (cove create --volume)",
	}
	var size int64
	create := &cobra.Command{
		Use:   "create NAME --size MIB",
		Short: "Create a volume of --size MiB (its quota)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !cmd.Flags().Changed("size") {
				return errors.New("cove volume create needs --size MIB (at least 16)")
			}
			cl, err := a.client()
			if err != nil {
				return err
			}
			v, err := cl.CreateVolume(cmd.Context(), args[0], size)
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
	create.Flags().Int64Var(&size, "size", 0, "the quota in MiB")
	a.jsonFlag(create)
	ls := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List the team's volumes",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := a.client()
			if err != nil {
				return err
			}
			items, err := listAll(func(cursor string) (api.List[api.Volume], error) {
				return cl.ListVolumes(cmd.Context(), 1000, cursor)
			})
			if err != nil {
				return err
			}
			return printList(a, items, "ID\tNAME\tSIZE_MIB\tUSED\tSANDBOXES\tCREATED", func(v api.Volume) string {
				sbs := strings.Join(v.Sandboxes, ",")
				if sbs == "" {
					sbs = "-"
				}
				return fmt.Sprintf("%s\t%s\t%d\t%d\t%s\t%s", v.ID, v.Name, v.SizeMiB, v.UsedBytes, sbs, v.CreatedAt.Format(time.RFC3339))
			})
		},
	}
	a.jsonFlag(ls)
	get := &cobra.Command{
		Use:   "get VOLUME",
		Short: "Show a volume (by ID or name)",
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
		Use:     "rm VOLUME...",
		Aliases: []string{"delete"},
		Short:   "Delete volumes and their files (not one a sandbox mounts)",
		Args:    cobra.MinimumNArgs(1),
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

// volumeMounts parses --volume flags: NAME:/PATH, with :ro or :rw after
// the path for read-only or read-write (the default).
func volumeMounts(flags []string) ([]api.VolumeMount, error) {
	var out []api.VolumeMount
	for _, f := range flags {
		name, path, ok := strings.Cut(f, ":")
		m := api.VolumeMount{Name: name, Path: path}
		if rest, mode, cut := cutLast(path, ":"); cut && (mode == "ro" || mode == "rw") {
			m.Path, m.ReadOnly = rest, mode == "ro"
		}
		if !ok || name == "" || !strings.HasPrefix(m.Path, "/") {
			return nil, fmt.Errorf("--volume %q must look like NAME:/PATH or NAME:/PATH:ro", f)
		}
		out = append(out, m)
	}
	return out, nil
}

// cutLast is strings.Cut at the last sep.
func cutLast(s, sep string) (before, after string, found bool) {
	if i := strings.LastIndex(s, sep); i >= 0 {
		return s[:i], s[i+len(sep):], true
	}
	return s, "", false
}
