package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/cove-dev/cove/api"
	cove "github.com/cove-dev/cove/sdk/go"
)

func (a *app) execCmd() *cobra.Command {
	var (
		req     api.CreateCommandRequest
		env     []string
		secrets []string
		timeout int64
		shell   bool
		detach  bool
		kill    bool
		noWake  bool
	)
	c := &cobra.Command{
		Use:   "exec REF -- ARGV...",
		Short: "Run a command in a sandbox, streaming its output; exits with its status",
		Long: `Run a command in a sandbox. Its stdout and stderr stream to yours, your stdin
is forwarded when it is a pipe or a file, and cove exits with the command's
status. Ctrl-C detaches (the command keeps running; 'cove logs' reattaches);
with --kill it sends TERM to the command instead. An asleep sandbox is woken
first (one going to sleep or waking is waited for); --no-wake fails instead.`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.ArgsLenAtDash() != 1 {
				return usageError{errors.New("usage: cove exec REF -- ARGV... (put -- before the command)")}
			}
			cl, err := a.client()
			if err != nil {
				return err
			}
			ref := args[0]
			if shell {
				if len(args) != 2 {
					return usageError{errors.New("--shell takes one command string after --")}
				}
				req.Command = args[1]
			} else {
				req.Argv = args[1:]
			}
			if req.Env, err = keyValues("--env", env); err != nil {
				return err
			}
			if req.Secrets, err = keyValues("--secret", secrets); err != nil {
				return err
			}
			if cmd.Flags().Changed("timeout") {
				req.TimeoutS = &timeout
			}
			stdin := forwardableStdin(a.env.Stdin)
			req.Stdin = stdin != nil && !detach
			ctx := cmd.Context()
			// Creating must not be cut by Ctrl-C halfway; it returns quickly.
			var opts []cove.ExecOption
			if noWake {
				opts = append(opts, cove.ExecNoWake())
			}
			c, err := cl.Exec(context.WithoutCancel(ctx), ref, req, opts...)
			if err != nil {
				return err
			}
			if detach {
				fmt.Fprintln(a.env.Stdout, c.ID)
				return nil
			}
			if req.Stdin {
				go func() {
					// Owned by the command's life: it ends with stdin's EOF
					// or when the process exits.
					if err := cl.Stdin(ctx, c.SandboxID, c.ID, stdin, true); err != nil && ctx.Err() == nil {
						fmt.Fprintln(a.env.Stderr, "cove: forwarding stdin: "+oneLine(err))
					}
				}()
			}
			code, err := a.follow(ctx, cl, c.SandboxID, c.ID, 0)
			if ctx.Err() != nil {
				if kill {
					if err := cl.Signal(context.WithoutCancel(ctx), c.SandboxID, c.ID, "TERM"); err != nil {
						return err
					}
					fmt.Fprintf(a.env.Stderr, "cove: sent TERM to %s\n", c.ID)
					return exitError{130}
				}
				fmt.Fprintf(a.env.Stderr, "cove: detached; %s keeps running. Reattach with: cove logs %s %s --follow\n", c.ID, ref, c.ID)
				return exitError{130}
			}
			if err != nil {
				return err
			}
			return exitError{code}
		},
	}
	f := c.Flags()
	f.StringVar(&req.Cwd, "cwd", "", "working directory (default: the sandbox's workdir)")
	f.StringArrayVarP(&env, "env", "e", nil, "environment variable KEY=VALUE (repeatable)")
	f.StringArrayVar(&secrets, "secret", nil, "environment variable from a team secret, KEY=SECRET_NAME (repeatable; see cove secrets)")
	f.StringVarP(&req.User, "user", "u", "", "run as user (default) or root")
	f.Int64Var(&timeout, "timeout", 0, "kill the command after this many seconds")
	f.BoolVar(&shell, "shell", false, "run the one argument as a bash command string")
	f.BoolVarP(&detach, "detach", "d", false, "start it and print its ID instead of streaming")
	f.BoolVar(&kill, "kill", false, "on Ctrl-C send TERM to the command instead of detaching")
	f.BoolVar(&noWake, "no-wake", false, "fail if the sandbox is not running instead of waking it")
	f.StringVar(&req.Tag, "tag", "", "a name of yours for the command, kept with it and shown in its listing (not unique)")
	return c
}

// forwardableStdin returns r when it is a pipe or a regular file: a
// terminal or /dev/null is not forwarded.
func forwardableStdin(r io.Reader) io.Reader {
	f, ok := r.(*os.File)
	if !ok {
		return r
	}
	fi, err := f.Stat()
	if err != nil {
		return nil
	}
	if fi.Mode()&os.ModeNamedPipe != 0 || fi.Mode().IsRegular() {
		return f
	}
	return nil
}

// follow streams a command's output after seq to stdout and stderr,
// resuming when the stream breaks, and returns the exit status to pass on.
func (a *app) follow(ctx context.Context, cl *cove.Client, ref, id string, after int64) (int, error) {
	code := -1
	for attempt := 0; ; attempt++ {
		err := cl.Output(ctx, ref, id, after, true, func(r api.OutputRecord) error {
			after = r.Seq
			switch {
			case r.Type == "exit":
				code = exitStatus(r)
			case r.Type == "truncated":
				fmt.Fprintln(a.env.Stderr, "cove: output past the recording limit was not kept")
			case r.Stream == "stderr":
				_, err := a.env.Stderr.Write(r.Data)
				return err
			default:
				_, err := a.env.Stdout.Write(r.Data)
				return err
			}
			return nil
		})
		if err == nil {
			return code, nil
		}
		if ctx.Err() != nil || api.ErrorCode(err) != api.CodeInternal || attempt >= 30 {
			return code, err
		}
		// The connection broke: resume after the last record seen.
		select {
		case <-time.After(time.Duration(min(attempt+1, 10)) * 200 * time.Millisecond):
		case <-ctx.Done():
			return code, ctx.Err()
		}
	}
}

// exitStatus is the shell's convention: the exit code, or 128+signal.
func exitStatus(r api.OutputRecord) int {
	if r.Signal != "" {
		if n := unix.SignalNum("SIG" + r.Signal); n != 0 {
			return 128 + int(n)
		}
		return 128
	}
	if r.ExitCode != nil && *r.ExitCode >= 0 {
		return *r.ExitCode
	}
	return 1
}

func (a *app) logsCmd() *cobra.Command {
	var (
		follow bool
		after  int64
	)
	c := &cobra.Command{
		Use:   "logs REF COMMAND_ID",
		Short: "Replay a command's recorded output; --follow waits for more",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := a.client()
			if err != nil {
				return err
			}
			if !follow {
				return cl.Output(cmd.Context(), args[0], args[1], after, false, func(r api.OutputRecord) error {
					if r.Stream == "stderr" {
						_, err := a.env.Stderr.Write(r.Data)
						return err
					}
					_, err := a.env.Stdout.Write(r.Data)
					return err
				})
			}
			code, err := a.follow(cmd.Context(), cl, args[0], args[1], after)
			if err != nil {
				return err
			}
			return exitError{code}
		},
	}
	c.Flags().BoolVarP(&follow, "follow", "f", false, "keep streaming until the command ends, then exit with its status")
	c.Flags().Int64Var(&after, "after", 0, "start after this sequence number")
	return c
}
