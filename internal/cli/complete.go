package cli

import (
	"context"
	"strings"
	"time"

	"github.com/spf13/cobra"

	cove "github.com/cove-dev/cove/sdk/go"
)

// sandboxCommands are the commands whose REF arguments name a sandbox
// (nodes, templates and images have REFs of their own).
var sandboxCommands = map[string]bool{
	"cove get": true, "cove rm": true, "cove sleep": true, "cove wake": true,
	"cove exec": true, "cove logs": true, "cove sh": true, "cove network": true,
	"cove preview": true, "cove metrics": true, "cove usage": true,
	"cove files ls": true, "cove files cat": true, "cove files put": true, "cove files get": true,
	"cove files edit": true, "cove files rm": true, "cove files mv": true, "cove files mkdir": true,
}

// completeSandboxes gives every command that takes a sandbox a completion
// of sandbox IDs and names, asked of the server with the current profile.
// When the server cannot be reached it offers nothing, quietly.
func (a *app) completeSandboxes(root *cobra.Command) {
	walk(root, func(c *cobra.Command) {
		if !sandboxCommands[c.CommandPath()] || c.ValidArgsFunction != nil {
			return
		}
		words := strings.Fields(c.Use)[1:]
		c.ValidArgsFunction = func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
			i := len(args)
			if i >= len(words) {
				if len(words) == 0 || !strings.HasSuffix(words[len(words)-1], "...") {
					return nil, cobra.ShellCompDirectiveNoFileComp
				}
				i = len(words) - 1
			}
			w := strings.Trim(words[i], "[]")
			switch {
			case strings.HasPrefix(w, "REF:"):
				if strings.Contains(toComplete, ":") {
					return nil, cobra.ShellCompDirectiveNoFileComp
				}
				refs := a.sandboxRefs(cmd.Context())
				for j := range refs {
					refs[j] += ":"
				}
				return refs, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveNoSpace
			case strings.HasPrefix(w, "REF"):
				return a.sandboxRefs(cmd.Context()), cobra.ShellCompDirectiveNoFileComp
			case strings.HasPrefix(w, "LOCAL"):
				return nil, cobra.ShellCompDirectiveDefault
			}
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
	})
}

// sandboxRefs lists the IDs and names of the sandboxes the current
// profile's key sees, or nothing when that cannot be done.
func (a *app) sandboxRefs(ctx context.Context) []string {
	if ctx == nil {
		ctx = context.Background()
	}
	c, err := a.client()
	if err != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	var out []string
	q := cove.SandboxQuery{Limit: 500}
	for pages := 0; pages < 10; pages++ {
		l, err := c.ListSandboxes(ctx, q)
		if err != nil {
			return out
		}
		for _, s := range l.Items {
			out = append(out, s.ID)
			if s.Name != "" {
				out = append(out, s.Name)
			}
		}
		if l.NextCursor == "" {
			break
		}
		q.Cursor = l.NextCursor
	}
	return out
}
