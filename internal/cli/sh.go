package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/cove-dev/cove/api"
)

// loginShell runs bash as a login shell where the image has it, else sh.
const loginShell = `if command -v bash >/dev/null 2>&1; then exec bash -l; else exec sh -l; fi`

func (a *app) shCmd() *cobra.Command {
	var user string
	c := &cobra.Command{
		Use:   "sh REF",
		Short: "Open an interactive shell in a sandbox",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			in, ok := a.env.Stdin.(*os.File)
			if !ok || !term.IsTerminal(int(in.Fd())) {
				return errors.New("cove sh needs a terminal; use cove exec for scripts")
			}
			cl, err := a.client()
			if err != nil {
				return err
			}
			fd := int(in.Fd())
			cols, rows, err := term.GetSize(fd)
			if err != nil {
				cols, rows = 80, 24
			}
			ctx := cmd.Context()
			c, err := cl.Exec(ctx, args[0], api.CreateCommandRequest{
				Command: loginShell, User: user, PTY: &api.PTY{Cols: cols, Rows: rows},
				Env: map[string]string{"TERM": envOr(a.env.Getenv("TERM"), "xterm-256color")},
			})
			if err != nil {
				return err
			}
			att, err := cl.Attach(ctx, c.SandboxID, c.ID, 0)
			if err != nil {
				return err
			}
			defer att.Close()
			old, err := term.MakeRaw(fd)
			if err != nil {
				return err
			}
			defer term.Restore(fd, old)

			// The shell ends the session; Ctrl-C goes to it as a byte.
			sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
			defer cancel()
			var wg sync.WaitGroup
			defer wg.Wait()
			defer cancel()
			winch := make(chan os.Signal, 1)
			signal.Notify(winch, syscall.SIGWINCH)
			defer signal.Stop(winch)
			wg.Go(func() {
				for {
					select {
					case <-winch:
						if c, r, err := term.GetSize(fd); err == nil {
							att.Resize(sctx, c, r)
						}
					case <-sctx.Done():
						return
					}
				}
			})
			go func() {
				// Reading the terminal blocks without a way to cancel; this
				// goroutine ends with the process, after the shell has.
				buf := make([]byte, 32<<10)
				for {
					n, err := in.Read(buf)
					if n > 0 && att.Write(sctx, buf[:n]) != nil {
						return
					}
					if err != nil {
						return
					}
				}
			}()
			for {
				data, done, err := att.Read(sctx)
				if err != nil {
					return fmt.Errorf("connection lost; the shell %s keeps running: %w", c.ID, err)
				}
				if done {
					break
				}
				a.env.Stdout.Write(data)
			}
			if att.Exit != nil {
				return exitError{exitStatus(*att.Exit)}
			}
			return nil
		},
	}
	c.Flags().StringVarP(&user, "user", "u", "", "run as user (default) or root")
	return c
}

func envOr(v, def string) string {
	if v == "" {
		return def
	}
	return v
}
