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
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/cli/cliconfig"
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
	if isUsageError(err) {
		return ExitUsage
	}
	return ExitCLI
}

func oneLine(err error) string {
	var ae *api.Error
	msg := err.Error()
	if errors.As(err, &ae) {
		msg = ae.Message
		if ae.Code == api.CodeUnauthenticated {
			msg += " (run `cove login`, or set COVE_API_KEY)"
		}
	}
	return strings.Join(strings.Fields(msg), " ")
}

// app holds what every subcommand shares.
type app struct {
	env     Env
	json    bool
	url     string
	key     string
	profile string
}

func newRoot(env Env) *cobra.Command {
	a := &app{env: env}
	root := &cobra.Command{
		Use:           "cove",
		Short:         "cove gives AI agents remote sandboxes",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       VersionLine(),
		Long:          "cove gives AI agents remote sandboxes.\n\n" + exitCodesHelp,
	}
	root.SetVersionTemplate("{{.Version}}\n")
	root.PersistentFlags().StringVar(&a.url, "url", "", "server URL (default $COVE_URL, the profile, or "+DefaultURL+")")
	root.PersistentFlags().StringVar(&a.key, "api-key", "", "API key (default $COVE_API_KEY or the profile's)")
	root.PersistentFlags().StringVar(&a.profile, "profile", "", "profile in the CLI config (default $COVE_PROFILE or \"default\")")
	root.AddCommand(a.serverCmds()...)
	root.AddCommand(
		a.createCmd(), a.lsCmd(), a.getCmd(), a.rmCmd(), a.sleepCmd(), a.wakeCmd(),
		a.execCmd(), a.logsCmd(), a.shCmd(),
		a.filesCmd(), a.watchCmd(),
		a.teamsCmd(), a.previewCmd(), a.templatesCmd(), a.benchCmd(), a.networkCmd(), a.eventsCmd(), a.mcpCmd(),
		a.secretsCmd(), a.snapshotCmd(), a.forkCmd(), a.volumeCmd(),
		a.metricsCmd(), a.usageCmd(), a.webhooksCmd(), a.imagesCmd(), a.workloadsCmd(), a.nodesCmd(),
		a.versionCmd(), a.loginCmd(), a.logoutCmd(),
	)
	// --config, --print-config and COVE_* variables for every command's flags.
	cliconfig.Install(root, env.Getenv)
	setExamples(root)
	markUsageErrors(root)
	a.completeSandboxes(root)
	return root
}

// jsonFlag adds --json to a read command.
func (a *app) jsonFlag(c *cobra.Command) {
	c.Flags().BoolVar(&a.json, "json", false, "print JSON instead of a table")
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
