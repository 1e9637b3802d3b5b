package cli

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/cove-dev/cove/api"
)

// maxSecretInput bounds what `cove secrets set` reads (the server takes
// 32 KiB; a little more lets it say so).
const maxSecretInput = 64 << 10

func (a *app) secretsCmd() *cobra.Command {
	secrets := &cobra.Command{
		Use:   "secrets",
		Short: "Manage the team's secrets (values are never shown again)",
	}
	set := &cobra.Command{
		Use:   "set NAME",
		Short: "Create or replace a secret, its value read from stdin",
		Long: `Create or replace a secret. The value is read from stdin: typed at a
terminal (not echoed), or piped (one trailing newline is dropped):

  cove secrets set github-token
  printf %s "$TOKEN" | cove secrets set github-token

Sandboxes and commands name it (--secret GITHUB_TOKEN=github-token); each
command gets the value as it is when the command starts.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := a.client()
			if err != nil {
				return err
			}
			value, err := a.readSecret(args[0])
			if err != nil {
				return err
			}
			sec, err := cl.PutSecret(cmd.Context(), args[0], value)
			if err != nil {
				return err
			}
			if a.json {
				return a.printJSON(sec)
			}
			fmt.Fprintf(a.env.Stderr, "secret %s stored\n", sec.Name)
			return nil
		},
	}
	a.jsonFlag(set)
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List the team's secrets (names and times, never values)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := a.client()
			if err != nil {
				return err
			}
			var items []api.Secret
			cursor := ""
			for {
				l, err := cl.ListSecrets(cmd.Context(), 1000, cursor)
				if err != nil {
					return err
				}
				items = append(items, l.Items...)
				if cursor = l.NextCursor; cursor == "" {
					break
				}
			}
			if a.json {
				return a.printJSON(api.List[api.Secret]{Items: append([]api.Secret{}, items...)})
			}
			tw := tabwriter.NewWriter(a.env.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tUPDATED\tCREATED")
			for _, s := range items {
				fmt.Fprintf(tw, "%s\t%s\t%s\n", s.Name, ago(s.UpdatedAt), ago(s.CreatedAt))
			}
			return tw.Flush()
		},
	}
	a.jsonFlag(ls)
	rm := &cobra.Command{
		Use:   "rm NAME...",
		Short: "Delete secrets",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := a.client()
			if err != nil {
				return err
			}
			var errs []error
			for _, name := range args {
				if err := cl.DeleteSecret(cmd.Context(), name); err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", name, err))
				}
			}
			return errors.Join(errs...)
		},
	}
	secrets.AddCommand(set, ls, rm)
	return secrets
}

// readSecret reads a value from stdin: without echo at a terminal, else
// everything piped in less one trailing newline.
func (a *app) readSecret(name string) (string, error) {
	if f, ok := a.env.Stdin.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		fmt.Fprintf(a.env.Stderr, "value of %s (not echoed): ", name)
		b, err := term.ReadPassword(int(f.Fd()))
		fmt.Fprintln(a.env.Stderr)
		if err != nil {
			return "", fmt.Errorf("read the value: %w", err)
		}
		if len(b) == 0 {
			return "", errors.New("no value typed; nothing stored")
		}
		return string(b), nil
	}
	b, err := io.ReadAll(io.LimitReader(a.env.Stdin, maxSecretInput+1))
	if err != nil {
		return "", fmt.Errorf("read the value from stdin: %w", err)
	}
	if len(b) > maxSecretInput {
		return "", fmt.Errorf("the value on stdin is longer than %d bytes", maxSecretInput)
	}
	b = bytes.TrimSuffix(b, []byte("\n"))
	b = bytes.TrimSuffix(b, []byte("\r"))
	if len(b) == 0 {
		return "", errors.New("stdin was empty; pipe the value in, or run at a terminal to type it")
	}
	return string(b), nil
}
