package cli

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/cove-dev/cove/api"
	cove "github.com/cove-dev/cove/sdk/go"
)

func (a *app) createCmd() *cobra.Command {
	var (
		req          api.CreateSandboxRequest
		cpus         float64
		memory       int64
		disk         int64
		env          []string
		secrets      []string
		labels       []string
		noWait       bool
		timeout      time.Duration
		from         string
		exclude      []string
		setup        string
		setupNet     []string
		setupTimeout int64
		setupCache   bool
		placeholders []string
		inject       []string
		volumes      []string
	)
	c := &cobra.Command{
		Use:   "create",
		Short: "Create a sandbox and wait until it runs",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := a.client()
			if err != nil {
				return err
			}
			f := cmd.Flags()
			if f.Changed("cpus") || f.Changed("memory") || f.Changed("disk") {
				req.Resources = &api.ResourcesRequest{}
				if f.Changed("cpus") {
					req.Resources.CPUs = &cpus
				}
				if f.Changed("memory") {
					req.Resources.MemoryMiB = &memory
				}
				if f.Changed("disk") {
					req.Resources.DiskMiB = &disk
				}
			}
			if req.Env, err = keyValues("--env", env); err != nil {
				return err
			}
			names, err := keyValues("--secret", secrets)
			if err != nil {
				return err
			}
			req.Secrets = api.SecretRefs(names)
			phs, err := keyValues("--secret-placeholder", placeholders)
			if err != nil {
				return err
			}
			for k, n := range phs {
				if req.Secrets == nil {
					req.Secrets = map[string]api.SecretRef{}
				}
				if _, dup := req.Secrets[k]; dup {
					return fmt.Errorf("%s is given by both --secret and --secret-placeholder", k)
				}
				req.Secrets[k] = api.SecretRef{Secret: n, Placeholder: true}
			}
			if len(inject) > 0 {
				rules, err := injectRules(inject)
				if err != nil {
					return err
				}
				req.Network = &api.NetworkPolicy{Allow: []string{}, Inject: rules}
			}
			if req.Labels, err = keyValues("--label", labels); err != nil {
				return err
			}
			if req.Volumes, err = volumeMounts(volumes); err != nil {
				return err
			}
			if setup != "" {
				req.Setup = &api.Setup{Command: setup, TimeoutS: setupTimeout, Cache: setupCache}
				if len(setupNet) > 0 {
					req.Setup.Network = &api.NetworkPolicy{Allow: setupNet}
				}
			}
			var sb api.Sandbox
			if from != "" {
				var res api.ArchiveResult
				sb, res, err = cl.CreateSandboxFromDir(cmd.Context(), req, from, cove.DirSource{
					Exclude:  exclude,
					Progress: func(r io.Reader) io.Reader { return a.progress("upload", r, -1) },
				})
				if err != nil {
					return sandboxNameTaken(cmd.Context(), cl, req.Name, err)
				}
				if !a.json {
					fmt.Fprintf(a.env.Stderr, "%d entries, %d bytes into %s\n", res.Entries, res.Bytes, res.Path)
				}
			} else {
				if len(exclude) > 0 {
					return fmt.Errorf("--exclude needs --from")
				}
				if sb, err = cl.CreateSandbox(cmd.Context(), req, false); err != nil {
					return sandboxNameTaken(cmd.Context(), cl, req.Name, err)
				}
			}
			if !noWait {
				if sb, err = cl.WaitSandbox(cmd.Context(), sb.ID, api.StateRunning, timeout); err != nil {
					return err
				}
				if sb.State != api.StateRunning {
					return fmt.Errorf("sandbox %s is %s: %s", sb.ID, sb.State, sb.StateReason)
				}
			}
			if a.json {
				return a.printJSON(sb)
			}
			fmt.Fprintln(a.env.Stdout, sb.ID)
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&req.Name, "name", "", "name, unique among your live sandboxes")
	f.StringVar(&req.Template, "template", "", "template (default: the server's, managed)")
	f.Float64Var(&cpus, "cpus", 0, "CPUs")
	f.Int64Var(&memory, "memory", 0, "memory in MiB")
	f.Int64Var(&disk, "disk", 0, "disk in MiB")
	f.StringVar(&req.Workdir, "workdir", "", "working directory (default /workspace)")
	f.StringArrayVarP(&env, "env", "e", nil, "environment variable KEY=VALUE (repeatable)")
	f.StringArrayVar(&secrets, "secret", nil, "environment variable from a team secret, KEY=SECRET_NAME (repeatable; see cove secrets)")
	f.StringArrayVar(&placeholders, "secret-placeholder", nil, "environment variable holding a placeholder of a team secret, KEY=SECRET_NAME; the network gateway puts the value in requests an --inject rule names it for (repeatable)")
	f.StringArrayVar(&inject, "inject", nil, "header the network gateway adds to HTTPS requests, 'HOST[:PORT][/PATH_PREFIX]=HEADER: VALUE' with {secret:NAME} in VALUE (repeatable; the host must still be allowed: cove network REF --allow)")
	f.StringArrayVarP(&labels, "label", "l", nil, "label KEY=VALUE (repeatable)")
	f.StringArrayVar(&volumes, "volume", nil, "mount a volume of the team, NAME:/PATH or NAME:/PATH:ro for read-only (repeatable; see cove volume)")
	f.StringVar(&from, "from", "", "a local folder to upload into the workdir (honours its "+cove.IgnoreFile+")")
	f.StringArrayVar(&exclude, "exclude", nil, "with --from: leave out paths matching this pattern (repeatable; as in "+cove.IgnoreFile+")")
	f.StringVar(&setup, "setup", "", "a setup command run once before the sandbox runs")
	f.StringArrayVar(&setupNet, "setup-allow", nil, "a destination the setup command may reach (repeatable)")
	f.Int64Var(&setupTimeout, "setup-timeout", 0, "setup timeout in seconds (default: the server's)")
	f.BoolVar(&setupCache, "setup-cache", false, "save the disk after the setup and start from it next time")
	f.BoolVar(&noWait, "no-wait", false, "return at once instead of waiting until it runs")
	f.DurationVar(&timeout, "timeout", 5*time.Minute, "how long to wait until it runs")
	a.jsonFlag(c)
	return c
}

// injectRules parses --inject flags: HOST[:PORT][/PATH_PREFIX]=HEADER: VALUE.
func injectRules(flags []string) ([]api.InjectRule, error) {
	rules := make([]api.InjectRule, 0, len(flags))
	for _, f := range flags {
		dest, hv, ok := strings.Cut(f, "=")
		header, value, ok2 := strings.Cut(hv, ":")
		if !ok || !ok2 || dest == "" || strings.ContainsAny(strings.TrimSpace(header), " \t{}") {
			return nil, fmt.Errorf("--inject %q must look like 'HOST[:PORT][/PATH_PREFIX]=HEADER: VALUE'", f)
		}
		r := api.InjectRule{Header: strings.TrimSpace(header), Value: strings.TrimSpace(value)}
		if i := strings.IndexByte(dest, '/'); i >= 0 {
			dest, r.PathPrefix = dest[:i], dest[i:]
		}
		r.Host = dest
		if h, p, ok := strings.Cut(dest, ":"); ok {
			n, err := strconv.Atoi(p)
			if err != nil {
				return nil, fmt.Errorf("--inject %q: bad port %q", f, p)
			}
			r.Host, r.Port = h, n
		}
		rules = append(rules, r)
	}
	return rules, nil
}

func keyValues(flag string, kvs []string) (map[string]string, error) {
	if len(kvs) == 0 {
		return nil, nil
	}
	m := map[string]string{}
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%s %q must look like KEY=VALUE", flag, kv)
		}
		m[k] = v
	}
	return m, nil
}

func (a *app) lsCmd() *cobra.Command {
	var (
		states []string
		labels []string
		all    bool
	)
	c := &cobra.Command{
		Use:   "ls",
		Short: "List sandboxes (live ones unless --all or --state)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := a.client()
			if err != nil {
				return err
			}
			q := cove.SandboxQuery{}
			for _, s := range states {
				q.States = append(q.States, api.SandboxState(s))
			}
			if q.Labels, err = keyValues("--label", labels); err != nil {
				return err
			}
			var items []api.Sandbox
			for {
				page, err := cl.ListSandboxes(cmd.Context(), q)
				if err != nil {
					return err
				}
				for _, sb := range page.Items {
					if all || len(states) > 0 || !sb.State.Terminal() {
						items = append(items, sb)
					}
				}
				if page.NextCursor == "" {
					break
				}
				q.Cursor = page.NextCursor
			}
			if a.json {
				return a.printJSON(api.List[api.Sandbox]{Items: append([]api.Sandbox{}, items...)})
			}
			tw := tabwriter.NewWriter(a.env.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tNAME\tSTATE\tCPUS\tMEMORY\tCREATED")
			for _, sb := range items {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%g\t%d MiB\t%s\n", sb.ID, dash(sb.Name), sb.State,
					sb.Resources.CPUs, sb.Resources.MemoryMiB, ago(sb.CreatedAt))
			}
			return tw.Flush()
		},
	}
	c.Flags().StringArrayVar(&states, "state", nil, "only sandboxes in this state (repeatable)")
	c.Flags().StringArrayVarP(&labels, "label", "l", nil, "only sandboxes with label KEY=VALUE (repeatable)")
	c.Flags().BoolVarP(&all, "all", "a", false, "include terminated and failed sandboxes")
	a.jsonFlag(c)
	return c
}

func (a *app) getCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "get REF",
		Short: "Show a sandbox by ID or name",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := a.client()
			if err != nil {
				return err
			}
			sb, err := cl.GetSandbox(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if a.json {
				return a.printJSON(sb)
			}
			tw := tabwriter.NewWriter(a.env.Stdout, 0, 4, 2, ' ', 0)
			row := func(k, v string) { fmt.Fprintf(tw, "%s:\t%s\n", k, v) }
			row("id", sb.ID)
			row("name", dash(sb.Name))
			row("state", string(sb.State))
			if sb.StateReason != "" {
				row("reason", sb.StateReason)
			}
			row("template", sb.Template)
			row("resources", fmt.Sprintf("%g CPUs, %d MiB memory, %d MiB disk", sb.Resources.CPUs, sb.Resources.MemoryMiB, sb.Resources.DiskMiB))
			row("workdir", sb.Workdir)
			row("created", sb.CreatedAt.Format(time.RFC3339))
			if len(sb.Labels) > 0 {
				keys := make([]string, 0, len(sb.Labels))
				for k := range sb.Labels {
					keys = append(keys, k+"="+sb.Labels[k])
				}
				sort.Strings(keys)
				row("labels", strings.Join(keys, ", "))
			}
			return tw.Flush()
		},
	}
	a.jsonFlag(c)
	return c
}

func (a *app) rmCmd() *cobra.Command {
	var wait bool
	c := &cobra.Command{
		Use:   "rm REF...",
		Short: "Terminate sandboxes: stop everything and delete their files",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := a.client()
			if err != nil {
				return err
			}
			for _, ref := range args {
				sb, err := cl.TerminateSandbox(cmd.Context(), ref)
				if err != nil {
					return err
				}
				if wait {
					if sb, err = cl.WaitSandbox(cmd.Context(), sb.ID, api.StateTerminated, 2*time.Minute); err != nil {
						return err
					}
				}
				fmt.Fprintf(a.env.Stdout, "%s %s\n", sb.ID, sb.State)
			}
			return nil
		},
	}
	c.Flags().BoolVar(&wait, "wait", true, "wait until terminated")
	return c
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func ago(t time.Time) string {
	d := time.Since(t).Round(time.Second)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d.Hours()))
	}
	return t.Format("2006-01-02")
}
