package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/cove-dev/cove/api"
	cove "github.com/cove-dev/cove/sdk/go"
)

func (a *app) sleepCmd() *cobra.Command {
	return a.transitionCmd("sleep", "Put sandboxes to sleep: save their files, release compute", api.StateAsleep,
		func(ctx context.Context, cl *cove.Client, ref string) (api.Sandbox, error) {
			return cl.SleepSandbox(ctx, ref)
		})
}

func (a *app) wakeCmd() *cobra.Command {
	return a.transitionCmd("wake", "Wake sandboxes: same ID and name, files restored, processes fresh", api.StateRunning,
		func(ctx context.Context, cl *cove.Client, ref string) (api.Sandbox, error) {
			return cl.WakeSandbox(ctx, ref)
		})
}

// transitionCmd is sleep or wake: start the transition, optionally wait for
// its end state, print each sandbox's state.
func (a *app) transitionCmd(name, short string, done api.SandboxState,
	start func(context.Context, *cove.Client, string) (api.Sandbox, error)) *cobra.Command {
	var (
		wait    bool
		timeout time.Duration
	)
	c := &cobra.Command{
		Use:   name + " REF...",
		Short: short,
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := a.client()
			if err != nil {
				return err
			}
			for _, ref := range args {
				sb, err := start(cmd.Context(), cl, ref)
				if err != nil {
					return err
				}
				if wait {
					if sb, err = cl.WaitSandbox(cmd.Context(), sb.ID, done, timeout); err != nil {
						return err
					}
					if sb.State != done {
						return fmt.Errorf("sandbox %s is %s, not %s: %s", sb.ID, sb.State, done, sb.StateReason)
					}
				}
				if a.json {
					if err := a.printJSON(sb); err != nil {
						return err
					}
					continue
				}
				fmt.Fprintf(a.env.Stdout, "%s %s\n", sb.ID, sb.State)
			}
			return nil
		},
	}
	c.Flags().BoolVar(&wait, "wait", false, "wait until it is "+string(done))
	c.Flags().DurationVar(&timeout, "timeout", 10*time.Minute, "how long --wait waits")
	a.jsonFlag(c)
	return c
}
