package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/cove-dev/cove/api"
	cove "github.com/cove-dev/cove/sdk/go"
)

func (a *app) workloadsCmd() *cobra.Command {
	wl := &cobra.Command{
		Use:     "workloads",
		Aliases: []string{"workload", "wl"},
		Short:   "Batch runs (GPU code included): queued until a node can place them, run to completion",
	}
	wl.AddCommand(a.workloadsSubmit(), a.workloadsList(), a.workloadsGet(), a.workloadsLogs(), a.workloadsCancel())
	return wl
}

func (a *app) workloadsSubmit() *cobra.Command {
	var (
		req                      api.CreateWorkloadRequest
		res                      api.WorkloadResourcesRequest
		shell, from, asset, git  string
		ref                      string
		env, secrets, labels     []string
		cpus                     float64
		memory, timeout, maxWait int64
		follow                   bool
	)
	c := &cobra.Command{
		Use:   "submit [flags] [-- PROGRAM ARGS…]",
		Short: "Submit a workload; prints its ID, or with --follow streams its output and exits with its status",
		Example: `  cove workloads submit --from . -- python3 train.py
  cove workloads submit --gpus 1 --follow -- nvidia-smi
  cove workloads submit --command 'make test' --asset ast_…`,
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case shell != "" && len(args) > 0:
				return fmt.Errorf("give --command or a program after --, not both")
			case shell == "" && len(args) == 0:
				return fmt.Errorf("give the program to run after -- (or a shell string with --command)")
			}
			req.Command, req.Argv = shell, args
			var err error
			if req.Env, err = keyValues("--env", env); err != nil {
				return err
			}
			if req.Secrets, err = keyValues("--secret", secrets); err != nil {
				return err
			}
			if req.Labels, err = keyValues("--label", labels); err != nil {
				return err
			}
			if cmd.Flags().Changed("cpus") {
				res.CPUs = &cpus
			}
			if cmd.Flags().Changed("memory-mib") {
				res.MemoryMiB = &memory
			}
			req.Resources = &res
			if cmd.Flags().Changed("timeout") {
				req.TimeoutS = &timeout
			}
			if cmd.Flags().Changed("max-queue") {
				req.MaxQueueS = &maxWait
			}
			cl, err := a.client()
			if err != nil {
				return err
			}
			n := 0
			for _, s := range []string{from, asset, git} {
				if s != "" {
					n++
				}
			}
			if n > 1 {
				return fmt.Errorf("give one source: --from, --asset or --git")
			}
			switch {
			case from != "":
				a, err := cl.CreateAssetFromDir(cmd.Context(), "workload-source", from, nil)
				if err != nil {
					return fmt.Errorf("upload %s: %w", from, err)
				}
				req.Source = &api.Source{Type: api.SourceAsset, AssetID: a.ID}
			case asset != "":
				req.Source = &api.Source{Type: api.SourceAsset, AssetID: asset}
			case git != "":
				req.Source = &api.Source{Type: api.SourceGit, URL: git, Ref: ref}
			}
			w, err := cl.SubmitWorkload(cmd.Context(), req)
			if err != nil {
				return err
			}
			if !follow {
				if a.json {
					return a.printJSON(w)
				}
				fmt.Fprintln(a.env.Stdout, w.ID)
				return nil
			}
			fmt.Fprintf(a.env.Stderr, "workload %s queued\n", w.ID)
			code, err := a.followWorkload(cmd.Context(), cl, w.ID)
			if err != nil {
				return err
			}
			return exitError{code}
		},
	}
	f := c.Flags()
	f.StringVar(&req.Template, "template", "", "template to run in (default: the server's)")
	f.StringVar(&req.Image, "image", "", "an image, by name, to run in (instead of --template)")
	f.StringVar(&shell, "command", "", "a shell string to run instead of a program after --")
	f.StringVar(&from, "from", "", "a local folder to run in: sent as an asset, extracted into the workdir")
	f.StringVar(&asset, "asset", "", "an asset (ast_…) extracted into the workdir")
	f.StringVar(&git, "git", "", "a git repository (https://…) cloned into the workdir")
	f.StringVar(&ref, "ref", "", "with --git: the branch, tag or commit")
	f.StringVar(&req.Workdir, "workdir", "", "working directory (default /workspace)")
	f.StringVar(&req.User, "user", "", "user or root (default user)")
	f.StringArrayVarP(&env, "env", "e", nil, "environment variable KEY=VALUE (repeatable)")
	f.StringArrayVar(&secrets, "secret", nil, "environment variable from a team secret, KEY=SECRET_NAME (repeatable)")
	f.StringArrayVarP(&labels, "label", "l", nil, "label KEY=VALUE (repeatable)")
	f.Float64Var(&cpus, "cpus", 0, "CPUs reserved")
	f.Int64Var(&memory, "memory-mib", 0, "memory reserved")
	f.IntVar(&res.GPUs, "gpus", 0, "GPUs (needs the team's gpu admission and a node with GPUs)")
	f.StringVar(&res.GPUType, "gpu-type", "", "GPU type a node must have (e.g. nvidia.com/gpu)")
	f.Int64Var(&timeout, "timeout", 0, "seconds the program may run before it is killed (default 3600)")
	f.Int64Var(&maxWait, "max-queue", 0, "seconds it may wait for a node before it fails (default 3600)")
	f.BoolVarP(&follow, "follow", "f", false, "stream its output once it runs, then exit with its status")
	a.jsonFlag(c)
	return c
}

// followWorkload waits for a workload to run (or end), streams its output
// and returns its exit status (1 when it ended without an exit code).
func (a *app) followWorkload(ctx context.Context, cl *cove.Client, id string) (int, error) {
	reported := ""
	for {
		w, err := cl.WaitWorkload(ctx, id, api.WorkloadRunning, time.Minute)
		if err != nil {
			return 1, err
		}
		if w.State == api.WorkloadQueued || w.State == api.WorkloadStarting {
			if w.StateReason != reported {
				fmt.Fprintf(a.env.Stderr, "workload %s is %s: %s\n", id, w.State, w.StateReason)
				reported = w.StateReason
			}
			continue
		}
		if w.StartedAt == nil {
			return 1, fmt.Errorf("workload %s is %s: %s", id, w.State, w.StateReason)
		}
		break
	}
	code := 1
	var after int64
	err := cl.WorkloadOutput(ctx, id, after, true, func(r api.OutputRecord) error {
		switch {
		case r.Type == "exit":
			code = exitStatus(r)
		case r.Stream == "stderr":
			_, err := a.env.Stderr.Write(r.Data)
			return err
		case r.Stream == "stdout":
			_, err := a.env.Stdout.Write(r.Data)
			return err
		}
		return nil
	})
	if errors.Is(err, cove.ErrStreamEnded) {
		// Cancelled while it ran: its output ends without an exit.
		w, gerr := cl.GetWorkload(ctx, id)
		if gerr == nil {
			return 1, fmt.Errorf("workload %s is %s: %s", id, w.State, w.StateReason)
		}
	}
	return code, err
}

func (a *app) workloadsList() *cobra.Command {
	var states []string
	c := &cobra.Command{
		Use:   "list",
		Short: "List the team's workloads",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := a.client()
			if err != nil {
				return err
			}
			var st []api.WorkloadState
			for _, s := range states {
				st = append(st, api.WorkloadState(s))
			}
			var all []api.Workload
			cursor := ""
			for {
				page, err := cl.ListWorkloads(cmd.Context(), 0, cursor, st...)
				if err != nil {
					return err
				}
				all = append(all, page.Items...)
				if cursor = page.NextCursor; cursor == "" {
					break
				}
			}
			if a.json {
				return a.printJSON(all)
			}
			tw := tabwriter.NewWriter(a.env.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tSTATE\tGPUS\tEXIT\tCOST\tCREATED\tCOMMAND")
			for _, w := range all {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t$%.4f\t%s\t%s\n", w.ID, w.State, w.Resources.GPUs, exitText(w),
					w.CostUSD, w.CreatedAt.Local().Format(time.DateTime), commandText(w))
			}
			return tw.Flush()
		},
	}
	c.Flags().StringSliceVar(&states, "state", nil, "only workloads in these states")
	a.jsonFlag(c)
	return c
}

func exitText(w api.Workload) string {
	switch {
	case w.ExitCode != nil:
		return fmt.Sprint(*w.ExitCode)
	case w.Signal != "":
		return "SIG" + w.Signal
	}
	return "-"
}

func commandText(w api.Workload) string {
	s := w.Command
	if s == "" {
		s = strings.Join(w.Argv, " ")
	}
	if len(s) > 60 {
		s = s[:57] + "..."
	}
	return s
}

func (a *app) workloadsGet() *cobra.Command {
	c := &cobra.Command{
		Use:   "get ID",
		Short: "Show a workload: its state and why, exit, GPUs and cost",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := a.client()
			if err != nil {
				return err
			}
			w, err := cl.GetWorkload(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if a.json {
				return a.printJSON(w)
			}
			tw := tabwriter.NewWriter(a.env.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintf(tw, "id\t%s\nstate\t%s\n", w.ID, w.State)
			if w.StateReason != "" {
				fmt.Fprintf(tw, "reason\t%s\n", w.StateReason)
			}
			fmt.Fprintf(tw, "template\t%s\ncommand\t%s\nresources\t%g CPUs, %d MiB, %d GPUs %s\n", w.Template, commandText(w),
				w.Resources.CPUs, w.Resources.MemoryMiB, w.Resources.GPUs, w.Resources.GPUType)
			if len(w.Devices) > 0 {
				fmt.Fprintf(tw, "devices\t%s\n", strings.Join(w.Devices, ", "))
			}
			fmt.Fprintf(tw, "exit\t%s\ncost\t$%.6f\n", exitText(w), w.CostUSD)
			return tw.Flush()
		},
	}
	a.jsonFlag(c)
	return c
}

func (a *app) workloadsLogs() *cobra.Command {
	var follow bool
	var after int64
	c := &cobra.Command{
		Use:   "logs ID",
		Short: "Replay a workload's recorded output; --follow waits for more and exits with its status",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := a.client()
			if err != nil {
				return err
			}
			if follow {
				code, err := a.followWorkload(cmd.Context(), cl, args[0])
				if err != nil {
					return err
				}
				return exitError{code}
			}
			return cl.WorkloadOutput(cmd.Context(), args[0], after, false, func(r api.OutputRecord) error {
				if r.Stream == "stderr" {
					_, err := a.env.Stderr.Write(r.Data)
					return err
				}
				_, err := a.env.Stdout.Write(r.Data)
				return err
			})
		},
	}
	c.Flags().BoolVarP(&follow, "follow", "f", false, "wait for it to run, stream until it ends, then exit with its status")
	c.Flags().Int64Var(&after, "after", 0, "start after this sequence number")
	return c
}

func (a *app) workloadsCancel() *cobra.Command {
	c := &cobra.Command{
		Use:   "cancel ID",
		Short: "Cancel a queued or running workload",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := a.client()
			if err != nil {
				return err
			}
			w, err := cl.CancelWorkload(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if a.json {
				return a.printJSON(w)
			}
			fmt.Fprintf(a.env.Stdout, "%s %s\n", w.ID, w.State)
			return nil
		},
	}
	a.jsonFlag(c)
	return c
}
