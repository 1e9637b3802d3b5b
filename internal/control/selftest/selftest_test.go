package selftest_test

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/runs"
	"github.com/cove-dev/cove/internal/control/selftest"
	"github.com/cove-dev/cove/internal/node"
	"github.com/cove-dev/cove/internal/node/nodetest"
)

// TestRun: each tool's first output line is its version; a tool that
// fails is named in Failures; the sandbox is removed after.
func TestRun(t *testing.T) {
	nd := nodetest.New()
	t.Cleanup(nd.Close)
	exits := runs.NewExits(func(string, string, node.Exit, bool) {})
	nd.OnExit = exits.Deliver
	nd.Run = func(ctx context.Context, spec node.ExecSpec, out *nodetest.Output) node.Exit {
		cmd := spec.Argv[len(spec.Argv)-1]
		if strings.HasPrefix(cmd, "node ") {
			return node.Exit{ExitCode: 127}
		}
		tool, _, _ := strings.Cut(cmd, " ")
		out.Write("stdout", []byte(tool+" 1.0\nmore\n"))
		return node.Exit{}
	}
	st, err := selftest.Run(t.Context(), selftest.Deps{
		Node: nd, Exits: exits,
		Spec:      func(sb api.Sandbox) node.SandboxSpec { return node.SandboxSpec{ID: sb.ID, Template: sb.Template} },
		Resources: api.Resources{CPUs: 1, MemoryMiB: 512, DiskMiB: 1024}, Workdir: "/home/user",
		Now: func() time.Time { return time.Unix(0, 0).UTC() }, Log: slog.New(slog.DiscardHandler),
	}, "managed")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(st.Failures, []string{"node"}) {
		t.Errorf("failures %v, want [node]", st.Failures)
	}
	for _, r := range st.Results {
		if r.Tool != "node" && (!r.OK || r.Version != r.Tool+" 1.0") {
			t.Errorf("result %+v, want ok with version %q", r, r.Tool+" 1.0")
		}
	}
	if ids, _ := nd.Known(t.Context()); len(ids) != 0 {
		t.Errorf("sandboxes left on the node: %v", ids)
	}
}
