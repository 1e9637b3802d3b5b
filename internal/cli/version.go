package cli

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version is the release this binary was built as: `make build` sets it
// from the newest tag (`git describe --tags --dirty`) with
// -ldflags "-X github.com/cove-dev/cove/internal/cli.version=…"; "dev"
// where the tree has no tag or the build did not set it.
var version = "dev"

// commit is the commit the binary was built from, set beside version by
// `make build` (git rev-parse; "-dirty" with uncommitted changes); where
// it is not set, Go's own record of the checkout is used, if it made one.
var commit = ""

// VersionLine is what `cove version` prints: the version, the commit the
// binary was built from ("-dirty" with uncommitted changes) and the Go
// version.
func VersionLine() string {
	if commit != "" {
		return fmt.Sprintf("cove %s (commit %s, %s)", version, commit, runtime.Version())
	}
	commit, dirty := "unknown", false
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				commit = s.Value[:min(len(s.Value), 7)]
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
	}
	if dirty && commit != "unknown" {
		commit += "-dirty"
	}
	return fmt.Sprintf("cove %s (commit %s, %s)", version, commit, runtime.Version())
}

func (a *app) versionCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "version",
		Short:   "Print the version, the commit and the Go version of this binary",
		Example: "  cove version\n  cove --version",
		Args:    cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(c.OutOrStdout(), VersionLine())
			return err
		},
	}
}
