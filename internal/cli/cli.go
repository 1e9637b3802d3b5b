// Package cli is the `cove` command line: thin commands over the Go SDK,
// plus `cove serve`. Main returns the process exit code, so tests can run
// the CLI whole, in-process.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/cli/cliconfig"
	cove "github.com/cove-dev/cove/sdk/go"
)

// DefaultURL is where the CLI looks for a server when nothing says otherwise.
const DefaultURL = "http://127.0.0.1:7070"

// Env is what the CLI reads from its surroundings; only main fills it.
type Env struct {
	Args   []string
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	Getenv func(string) string
}

// exitError carries an exit status without a message (a command's own
// status, passed through).
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// Main runs the CLI and returns the exit code.
func Main(ctx context.Context, env Env) int {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := newRoot(env)
	root.SetArgs(env.Args)
	root.SetIn(env.Stdin)
	root.SetOut(env.Stdout)
	root.SetErr(env.Stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	var ee exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	fmt.Fprintln(env.Stderr, "cove: "+oneLine(err))
	return 1
}

func oneLine(err error) string {
	var ae *api.Error
	msg := err.Error()
	if errors.As(err, &ae) {
		msg = ae.Message
		if ae.Code == api.CodeUnauthenticated {
			msg += " (set COVE_API_KEY or run `cove serve` once to write the CLI config)"
		}
	}
	return strings.Join(strings.Fields(msg), " ")
}

// app holds what every subcommand shares.
type app struct {
	env  Env
	json bool
	url  string
	key  string
}

func newRoot(env Env) *cobra.Command {
	a := &app{env: env}
	root := &cobra.Command{
		Use:           "cove",
		Short:         "cove gives AI agents remote sandboxes",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       VersionLine(),
	}
	root.SetVersionTemplate("{{.Version}}\n")
	root.PersistentFlags().StringVar(&a.url, "url", "", "server URL (default $COVE_URL, the config file, or "+DefaultURL+")")
	root.AddCommand(a.serverCmds()...)
	root.AddCommand(
		a.createCmd(), a.lsCmd(), a.getCmd(), a.rmCmd(), a.sleepCmd(), a.wakeCmd(),
		a.execCmd(), a.logsCmd(), a.shCmd(),
		a.filesCmd(),
		a.teamsCmd(), a.previewCmd(), a.templatesCmd(), a.benchCmd(), a.networkCmd(), a.eventsCmd(), a.mcpCmd(),
		a.secretsCmd(),
		a.metricsCmd(), a.usageCmd(), a.webhooksCmd(), a.imagesCmd(), a.workloadsCmd(), a.nodesCmd(),
		a.versionCmd(),
	)
	// --config, --print-config and COVE_* variables for every command's flags.
	cliconfig.Install(root, env.Getenv)
	return root
}

// jsonFlag adds --json to a read command.
func (a *app) jsonFlag(c *cobra.Command) {
	c.Flags().BoolVar(&a.json, "json", false, "print JSON instead of a table")
}

// Config is the CLI's config file, ~/.config/cove/config.json.
type Config struct {
	URL    string `json:"url"`
	APIKey string `json:"api_key"`
}

// ConfigPath is where the CLI config lives for a home directory.
func ConfigPath(home string) string { return filepath.Join(home, ".config", "cove", "config.json") }

// WriteConfig writes the CLI config of the user whose home is home.
func WriteConfig(home string, c Config) error {
	p := ConfigPath(home)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return err
	}
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, p)
}

func (a *app) client() (*cove.Client, error) {
	cfg, err := a.config()
	if err != nil {
		return nil, err
	}
	key := firstNonEmpty(a.env.Getenv("COVE_API_KEY"), cfg.APIKey)
	if key == "" {
		return nil, errors.New("no API key: set COVE_API_KEY, or run `cove serve` once to write " + ConfigPath("~"))
	}
	return cove.New(a.urlOf(cfg), key), nil
}

// serverURL is the server the CLI talks to: --url, $COVE_URL, the config
// file, or DefaultURL.
func (a *app) serverURL() (string, error) {
	cfg, err := a.config()
	if err != nil {
		return "", err
	}
	return a.urlOf(cfg), nil
}

func (a *app) urlOf(cfg Config) string {
	return firstNonEmpty(a.url, a.env.Getenv("COVE_URL"), cfg.URL, DefaultURL)
}

// config reads the CLI config file, if there is one.
func (a *app) config() (Config, error) {
	var cfg Config
	if home := a.env.Getenv("HOME"); home != "" {
		if b, err := os.ReadFile(ConfigPath(home)); err == nil {
			if err := json.Unmarshal(b, &cfg); err != nil {
				return cfg, fmt.Errorf("read %s: %w", ConfigPath(home), err)
			}
		}
	}
	return cfg, nil
}

func firstNonEmpty(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}

func (a *app) printJSON(v any) error {
	enc := json.NewEncoder(a.env.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
