package cli

import (
	"fmt"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/cove-dev/cove/api"
)

// imageSettingsFlags are the flags of `cove images import` and `update`
// that set an image's settings.
type imageSettingsFlags struct {
	admission string
	teams     []string
	examples  []string
	cpus      float64
	memory    int64
	disk      int64
	maxCPUs   float64
	maxMemory int64
	maxDisk   int64
	allow     []string
	idle      int64
	lifetime  int64
}

func (f *imageSettingsFlags) add(c *cobra.Command) {
	fl := c.Flags()
	fl.StringVar(&f.admission, "admission", "", `who may use the image: owner, teams (with --team) or all (admins only)`)
	fl.StringSliceVar(&f.teams, "team", nil, "a team ID admitted with --admission teams (repeatable)")
	fl.StringArrayVar(&f.examples, "example", nil, "a command the console offers for the image (repeatable)")
	fl.Float64Var(&f.cpus, "cpus", 0, "default CPUs of its sandboxes")
	fl.Int64Var(&f.memory, "memory-mib", 0, "default memory of its sandboxes, MiB")
	fl.Int64Var(&f.disk, "disk-mib", 0, "default disk of its sandboxes, MiB")
	fl.Float64Var(&f.maxCPUs, "max-cpus", 0, "most CPUs a sandbox of it may ask for")
	fl.Int64Var(&f.maxMemory, "max-memory-mib", 0, "most memory a sandbox of it may ask for, MiB")
	fl.Int64Var(&f.maxDisk, "max-disk-mib", 0, "most disk a sandbox of it may ask for, MiB")
	fl.StringArrayVar(&f.allow, "allow", nil, "default network destination of its sandboxes (repeatable; host, *.suffix, CIDR, with :port)")
	fl.Int64Var(&f.idle, "idle-timeout", 0, "default idle timeout of its sandboxes, seconds")
	fl.Int64Var(&f.lifetime, "max-lifetime", 0, "default lifetime of its sandboxes, seconds")
}

// settings reads the flags that were given.
func (f *imageSettingsFlags) settings(c *cobra.Command) api.ImageSettings {
	ch := c.Flags().Changed
	var st api.ImageSettings
	if ch("admission") || ch("team") {
		mode := f.admission
		if mode == "" {
			mode = api.ImageAdmitTeams
		}
		st.Admission = &api.ImageAdmission{Mode: mode, Teams: f.teams}
	}
	if ch("example") {
		st.Examples = f.examples
	}
	var d api.ImageDefaults
	var r api.ResourcesRequest
	hasD, hasR := false, false
	if ch("cpus") {
		r.CPUs, hasR = &f.cpus, true
	}
	if ch("memory-mib") {
		r.MemoryMiB, hasR = &f.memory, true
	}
	if ch("disk-mib") {
		r.DiskMiB, hasR = &f.disk, true
	}
	if hasR {
		d.Resources, hasD = &r, true
	}
	if ch("allow") {
		d.Network, hasD = &api.NetworkPolicy{Allow: f.allow}, true
	}
	if ch("idle-timeout") {
		d.IdleTimeoutS, hasD = &f.idle, true
	}
	if ch("max-lifetime") {
		d.MaxLifetimeS, hasD = &f.lifetime, true
	}
	if hasD {
		st.Defaults = &d
	}
	var m api.ResourcesRequest
	hasM := false
	if ch("max-cpus") {
		m.CPUs, hasM = &f.maxCPUs, true
	}
	if ch("max-memory-mib") {
		m.MemoryMiB, hasM = &f.maxMemory, true
	}
	if ch("max-disk-mib") {
		m.DiskMiB, hasM = &f.maxDisk, true
	}
	if hasM {
		st.Limits = &api.ImageLimits{MaxResources: &m}
	}
	return st
}

func (a *app) imagesCmd() *cobra.Command {
	images := &cobra.Command{
		Use:   "images",
		Short: "Import and manage images from OCI artifacts (an image is a template by its name)",
	}
	var name string
	var imp imageSettingsFlags
	importCmd := &cobra.Command{
		Use:   "import FILE --name NAME",
		Short: "Import an OCI image layout archive or a `docker save` archive",
		Long: `Import an image from an OCI image layout archive (a tar with oci-layout,
index.json and blobs/) or a docker-save archive (docker save IMAGE -o FILE).
The team needs the custom_images admission. Sandboxes name the image as
their template: cove create --template NAME.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if name == "" {
				return fmt.Errorf("name the image: --name NAME")
			}
			cl, err := a.client()
			if err != nil {
				return err
			}
			f, err := os.Open(args[0])
			if err != nil {
				return err
			}
			defer f.Close()
			st := imp.settings(cmd)
			img, err := cl.ImportImage(cmd.Context(), name, &st, f)
			if err != nil {
				return imageNameTaken(cmd.Context(), cl, name, err)
			}
			return a.printImage(img)
		},
	}
	importCmd.Flags().StringVar(&name, "name", "", "the image's name, used as a sandbox's template (required)")
	imp.add(importCmd)
	a.jsonFlag(importCmd)

	ls := &cobra.Command{
		Use:   "ls",
		Short: "List the images the team may use",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := a.client()
			if err != nil {
				return err
			}
			l, err := cl.Images(cmd.Context())
			if err != nil {
				return err
			}
			if a.json {
				return a.printJSON(l.Items)
			}
			tw := tabwriter.NewWriter(a.env.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tNAME\tTEAM\tADMISSION\tSIZE\tDIGEST")
			for _, img := range l.Items {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\n", img.ID, img.Name, img.TeamID, img.Admission.Mode, img.SizeBytes, shortDigest(img.Digest))
			}
			return tw.Flush()
		},
	}
	ls.Aliases = []string{"list"}
	a.jsonFlag(ls)

	get := &cobra.Command{
		Use:   "get IMAGE",
		Short: "Show an image (ID or name): its OCI config and settings",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := a.client()
			if err != nil {
				return err
			}
			img, err := cl.GetImage(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return a.printImage(img)
		},
	}
	a.jsonFlag(get)

	var upd imageSettingsFlags
	update := &cobra.Command{
		Use:   "update IMAGE",
		Short: "Change an image's settings (defaults, limits, admission, examples)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := a.client()
			if err != nil {
				return err
			}
			img, err := cl.UpdateImage(cmd.Context(), args[0], upd.settings(cmd))
			if err != nil {
				return err
			}
			return a.printImage(img)
		},
	}
	upd.add(update)
	a.jsonFlag(update)

	rm := &cobra.Command{
		Use:     "rm IMAGE",
		Aliases: []string{"delete"},
		Short:   "Delete an image no sandbox uses",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := a.client()
			if err != nil {
				return err
			}
			return cl.DeleteImage(cmd.Context(), args[0])
		},
	}
	images.AddCommand(importCmd, ls, get, update, rm)
	return images
}

func (a *app) printImage(img api.Image) error {
	if a.json {
		return a.printJSON(img)
	}
	w := a.env.Stdout
	fmt.Fprintf(w, "%s %s (team %s)\n", img.ID, img.Name, img.TeamID)
	fmt.Fprintf(w, "digest:     %s (%d bytes)\n", img.Digest, img.SizeBytes)
	c := img.Config
	fmt.Fprintf(w, "user:       %q (uid %d, gid %d)\n", c.User, c.UID, c.GID)
	fmt.Fprintf(w, "workdir:    %s\n", c.WorkingDir)
	shell := strings.Join(c.Shell, " ")
	if shell == "" {
		shell = "none (argv only)"
	}
	fmt.Fprintf(w, "shell:      %s\n", shell)
	fmt.Fprintf(w, "admission:  %s %s\n", img.Admission.Mode, strings.Join(img.Admission.Teams, ","))
	return nil
}

func shortDigest(d string) string {
	if len(d) > 19 {
		return d[:19]
	}
	return d
}
