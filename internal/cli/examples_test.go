package cli

import (
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// TestEveryCommandHasAnExample walks the command tree: every command a
// person runs shows an Example in its help.
func TestEveryCommandHasAnExample(t *testing.T) {
	root := newRoot(Env{Getenv: func(string) string { return "" }})
	root.InitDefaultCompletionCmd()
	walk(root, func(c *cobra.Command) {
		if c.Hidden || c == root || c.Name() == "help" {
			return
		}
		if strings.TrimSpace(c.Example) == "" {
			t.Errorf("%s has no Example", c.CommandPath())
		}
	})
}
