package cli

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/cove-dev/cove/api"
)

func (a *app) loginCmd() *cobra.Command {
	var fromStdin bool
	var caFile string
	c := &cobra.Command{
		Use:   "login [URL]",
		Short: "Check an API key against a server and keep it in a profile",
		Long: `Login asks for an API key without echoing it (or reads it from standard
input with --api-key-stdin, or takes --api-key or $COVE_API_KEY), checks it with GET /v1/teams/me, and stores
the URL and key in $XDG_CONFIG_HOME/cove/config.json (~/.config when
XDG_CONFIG_HOME is unset; mode 0600) under the profile named by --profile,
$COVE_PROFILE, or "default". For a server whose certificate comes from a
private CA, --ca-cert FILE (or $SSL_CERT_FILE) names the CA; its PEM is
stored with the profile so later commands trust it too.`,
		Example: `  cove login
  cove login https://cove.example.com --ca-cert ca.pem
  echo "$KEY" | cove login https://cove.example.com --profile agent --api-key-stdin`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			url := firstNonEmpty(a.url, a.env.Getenv("COVE_URL"), DefaultURL)
			if len(args) == 1 {
				url = args[0]
			}
			url = strings.TrimRight(url, "/")
			key, err := a.readKey(fromStdin)
			if err != nil {
				return err
			}
			caFile = firstNonEmpty(caFile, a.env.Getenv("SSL_CERT_FILE"))
			p := Profile{URL: url, APIKey: key}
			if caFile != "" {
				b, err := os.ReadFile(caFile)
				if err != nil {
					return fmt.Errorf("--ca-cert: %w", err)
				}
				p.CACert = string(b)
			}
			c, err := a.clientFor(p, "")
			if err != nil {
				return err
			}
			me, err := c.Admission(cmd.Context())
			if err != nil {
				if api.ErrorCode(err) == api.CodeUnauthenticated {
					return fmt.Errorf("%s does not accept this key", url)
				}
				return err
			}
			name := a.profileName()
			if err := SaveProfile(a.env.Getenv, name, p); err != nil {
				return err
			}
			who := "team " + me.Team.Name
			if me.Admin {
				who = "the admin key"
			}
			fmt.Fprintf(a.env.Stdout, "logged in to %s as %s (profile %q in %s)\n", url, who, name, ConfigPath(a.env.Getenv))
			return nil
		},
	}
	c.Flags().BoolVar(&fromStdin, "api-key-stdin", false, "read the API key from standard input instead of prompting")
	c.Flags().StringVar(&caFile, "ca-cert", "", "PEM file of the CA that signed the server's certificate (default $SSL_CERT_FILE)")
	return c
}

// readKey reads the API key: --api-key, the first line of standard input
// with --api-key-stdin, or a prompt on the terminal without echo.
func (a *app) readKey(fromStdin bool) (string, error) {
	if a.key != "" {
		return a.key, nil
	}
	var key string
	if fromStdin {
		line, err := bufio.NewReader(a.env.Stdin).ReadString('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return "", err
		}
		key = line
	} else {
		f, ok := a.env.Stdin.(*os.File)
		if !ok || !term.IsTerminal(int(f.Fd())) {
			return "", usageError{errors.New("standard input is not a terminal: pass the key with --api-key-stdin")}
		}
		fmt.Fprint(a.env.Stderr, "API key: ")
		b, err := term.ReadPassword(int(f.Fd()))
		fmt.Fprintln(a.env.Stderr)
		if err != nil {
			return "", err
		}
		key = string(b)
	}
	key = strings.TrimSpace(key)
	if key == "" {
		return "", errors.New("no API key given")
	}
	return key, nil
}

func (a *app) logoutCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "logout",
		Short: "Remove a profile's server and key from the CLI config",
		Example: `  cove logout
  cove logout --profile agent`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := ReadConfig(a.env.Getenv)
			if err != nil {
				return err
			}
			name := a.profileName()
			if !cfg.Delete(name) {
				return fmt.Errorf("no profile %q in %s", name, ConfigPath(a.env.Getenv))
			}
			if err := WriteConfig(a.env.Getenv, cfg); err != nil {
				return err
			}
			fmt.Fprintf(a.env.Stdout, "removed profile %q\n", name)
			return nil
		},
	}
}
