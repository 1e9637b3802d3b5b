package cli

import (
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/cove-dev/cove/api"
)

func (a *app) previewCmd() *cobra.Command {
	var public, wake, list bool
	var remove string
	c := &cobra.Command{
		Use:   "preview REF [PORT]",
		Short: "Publish a sandbox's port over HTTP and print its URL (--ls lists, --rm ID removes)",
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := a.client()
			if err != nil {
				return err
			}
			ref := args[0]
			switch {
			case remove != "":
				return cl.DeletePreview(cmd.Context(), ref, remove)
			case list || len(args) == 1:
				ps, err := cl.Previews(cmd.Context(), ref)
				if err != nil {
					return err
				}
				if a.json {
					return a.printJSON(ps)
				}
				tw := tabwriter.NewWriter(a.env.Stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "ID\tPORT\tVISIBILITY\tWAKE\tURL")
				for _, p := range ps {
					fmt.Fprintf(tw, "%s\t%d\t%s\t%t\t%s\n", p.ID, p.Port, p.Visibility, p.Wake, p.URL)
				}
				return tw.Flush()
			}
			port, err := strconv.Atoi(args[1])
			if err != nil {
				return fmt.Errorf("port %q is not a number", args[1])
			}
			req := api.CreatePreviewRequest{Port: port, Visibility: api.VisibilityPrivate, Wake: wake}
			if public {
				req.Visibility = api.VisibilityPublic
			}
			p, err := cl.CreatePreview(cmd.Context(), ref, req)
			if api.ErrorCode(err) == api.CodeConflict {
				asked := map[string]bool{"public": cmd.Flags().Changed("public"), "wake": cmd.Flags().Changed("wake")}
				return a.existingPreview(cmd.Context(), cl, ref, req, asked, err)
			}
			if err != nil {
				return err
			}
			if a.json {
				return a.printJSON(p)
			}
			fmt.Fprintln(a.env.Stdout, p.URL)
			if p.Token != "" {
				fmt.Fprintf(a.env.Stderr, "private preview %s: send %s: %s (shown once),\nor open this one-time link in a browser: %s\n", p.ID, api.PreviewTokenHeader, p.Token, p.Link)
			}
			return nil
		},
	}
	c.Flags().BoolVar(&public, "public", false, "anyone with the URL may use it (default: private, the token is needed)")
	c.Flags().BoolVar(&wake, "wake", false, "a request wakes the sandbox when it is asleep")
	c.Flags().BoolVar(&list, "ls", false, "list the sandbox's previews")
	c.Flags().StringVar(&remove, "rm", "", "remove the preview with this ID")
	a.jsonFlag(c)
	return c
}

// admitCmd is `cove teams admit TEAM --preview …`: it sets the named
// flags and keeps the others (--no-preview, … take one away).
func (a *app) admitCmd() *cobra.Command {
	flags := map[string]*bool{}
	c := &cobra.Command{
		Use:   "admit TEAM",
		Short: "Let a team use what its admission flags name (admin key); TEAM is a name or ID",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := a.client()
			if err != nil {
				return err
			}
			teams, err := cl.ListTeams(cmd.Context())
			if err != nil {
				return err
			}
			var team *api.Team
			for i := range teams {
				if teams[i].Name == args[0] || teams[i].ID == args[0] {
					team = &teams[i]
				}
			}
			if team == nil {
				return fmt.Errorf("no team %q", args[0])
			}
			adm := team.Admission
			set := map[string]*bool{
				"managed-environment": &adm.ManagedEnvironment, "preview": &adm.Preview,
				"custom-images": &adm.CustomImages, "gpu": &adm.GPU,
			}
			for name, v := range set {
				if cmd.Flags().Changed(name) {
					*v = *flags[name]
				}
				if cmd.Flags().Changed("no-" + name) {
					*v = false
				}
			}
			t, err := cl.SetAdmission(cmd.Context(), team.ID, adm)
			if err != nil {
				return err
			}
			if a.json {
				return a.printJSON(t)
			}
			var on []string
			for _, f := range []struct {
				name string
				v    bool
			}{{"managed_environment", t.Admission.ManagedEnvironment}, {"preview", t.Admission.Preview}, {"custom_images", t.Admission.CustomImages}, {"gpu", t.Admission.GPU}} {
				if f.v {
					on = append(on, f.name)
				}
			}
			fmt.Fprintf(a.env.Stdout, "team %s admits: %s\n", t.Name, strings.Join(on, ", "))
			return nil
		},
	}
	for _, name := range []string{"managed-environment", "preview", "custom-images", "gpu"} {
		flags[name] = c.Flags().Bool(name, false, "admit "+strings.ReplaceAll(name, "-", " "))
		c.Flags().Bool("no-"+name, false, "take "+strings.ReplaceAll(name, "-", " ")+" away")
	}
	a.jsonFlag(c)
	return c
}

func (a *app) teamMeCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "me",
		Short: "Show this key's team, what it is admitted to and its limits",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := a.client()
			if err != nil {
				return err
			}
			me, err := cl.Admission(cmd.Context())
			if err != nil {
				return err
			}
			if a.json {
				return a.printJSON(me)
			}
			fmt.Fprintf(a.env.Stdout, "team %s (%s)\nadmitted: %s\nmax resources: %g CPUs, %d MiB memory, %d MiB disk\n",
				me.Team.Name, me.Team.ID, strings.Join(me.Admitted, ", "),
				me.Limits.MaxResources.CPUs, me.Limits.MaxResources.MemoryMiB, me.Limits.MaxResources.DiskMiB)
			return nil
		},
	}
	a.jsonFlag(c)
	return c
}

func (a *app) templatesCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "templates",
		Short: "List the templates this team may use: building (progress), ready or failed, and their self-tests",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := a.client()
			if err != nil {
				return err
			}
			ts, err := cl.Templates(cmd.Context())
			if err != nil {
				return err
			}
			if a.json {
				return a.printJSON(ts)
			}
			tw := tabwriter.NewWriter(a.env.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tKIND\tSTATUS\tQUALIFIED\tDETAIL")
			for _, t := range ts {
				detail := t.Progress
				if t.Reason != "" {
					detail = t.Reason
				}
				if t.SelfTest != nil && len(t.SelfTest.Failures) > 0 {
					detail = strings.TrimSpace(detail + " self-test failed: " + strings.Join(t.SelfTest.Failures, ", "))
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%t\t%s\n", t.Name, t.Kind, t.Status, t.Qualified, detail)
			}
			return tw.Flush()
		},
	}
	a.jsonFlag(c)
	return c
}
