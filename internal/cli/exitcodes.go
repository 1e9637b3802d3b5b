package cli

import (
	"errors"
	"strings"

	"github.com/spf13/cobra"
)

// Exit codes of the CLI itself. A command run in a sandbox passes its own
// status through unchanged instead.
const (
	// ExitUsage is a usage error: an unknown command or flag, a wrong
	// number of arguments, a missing required flag.
	ExitUsage = 2
	// ExitCLI is every other failure of the CLI itself: an unknown
	// sandbox, an unreachable server, an API error.
	ExitCLI = 125
)

const exitCodesHelp = `Exit codes:
  N    cove exec, cove sh: the status of the command run in the sandbox,
       unchanged (127 from its shell included)
  0    success
  2    usage error: unknown command or flag, wrong number of arguments
  125  any other failure of cove itself: unknown sandbox, unreachable
       server, an error answered by the API`

// usageError marks an error as the caller's misuse of the command line.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// markUsageErrors makes flag and argument errors of every command in the
// tree usage errors.
func markUsageErrors(root *cobra.Command) {
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	walk(root, func(c *cobra.Command) {
		if c.Args == nil {
			return
		}
		args := c.Args
		c.Args = func(c *cobra.Command, a []string) error {
			if err := args(c, a); err != nil {
				return usageError{err}
			}
			return nil
		}
	})
}

// isUsageError says whether err is a usage error, including the ones
// cobra makes itself before any command runs.
func isUsageError(err error) bool {
	var ue usageError
	if errors.As(err, &ue) {
		return true
	}
	msg := err.Error()
	for _, p := range []string{"unknown command ", "unknown flag", "unknown shorthand flag", "required flag(s)", "if any flags in the group"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

// walk calls f on c and every command below it.
func walk(c *cobra.Command, f func(*cobra.Command)) {
	f(c)
	for _, s := range c.Commands() {
		walk(s, f)
	}
}
