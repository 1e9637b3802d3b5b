// Package selftest qualifies a template: a sandbox of it, outside the
// store, runs each tool the managed environment promises and reports
// their versions and failures.
package selftest

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/runs"
	"github.com/cove-dev/cove/internal/id"
	"github.com/cove-dev/cove/internal/node"
)

// Node starts, runs commands in and removes the self-test's sandbox.
type Node interface {
	Start(ctx context.Context, spec node.SandboxSpec) error
	Destroy(ctx context.Context, id string) error
	Exec(ctx context.Context, sandboxID string, spec node.ExecSpec) (node.Started, error)
	Output(sandboxID, commandID string) (node.Output, error)
}

// Deps are what a self-test runs with.
type Deps struct {
	Node Node
	// Exits routes the node's exit reports; the self-test's sandbox
	// registers a receiver that ignores them (it reads its commands'
	// recorded output).
	Exits *runs.Exits
	// Spec is the node's spec of a sandbox (the core's).
	Spec func(api.Sandbox) node.SandboxSpec
	// Resources and Workdir are a default sandbox's.
	Resources api.Resources
	Workdir   string
	Now       func() time.Time
	Log       *slog.Logger
}

// tools are what the managed environment promises, each checked
// by a command whose first line of output is the tool's version.
var tools = []struct{ tool, command string }{
	{"bash", "bash --version"},
	{"python3", "python3 --version 2>&1"},
	{"node", "node --version"},
	{"git", "git --version"},
	{"curl", "curl --version"},
}

// Run starts a sandbox of the template on the node (outside the store: no
// team sees it), runs each tool the managed environment promises in it,
// records versions and failures, and removes it. The template is
// qualified when every tool worked.
func Run(ctx context.Context, d Deps, template string) (api.SelfTest, error) {
	sid := id.New("sbx")
	// Its commands' exits are not looked for in the store: the self-test
	// reads them from their recorded output.
	defer d.Exits.Register(sid, runs.ReceiverFunc(func(string, node.Exit, bool) {}))()
	// Its run: the template with the default resources, no network, each
	// tool's check as a program of the user, bounded to a minute.
	run := runs.Spec{
		Kind: runs.SelfTest, Template: template, Resources: d.Resources, Workdir: d.Workdir,
		Network: api.NetworkPolicy{Allow: []string{}}, User: "user", TimeoutS: 60,
	}
	spec := d.Spec(api.Sandbox{ID: sid, Template: run.Template, Resources: run.Resources, Workdir: run.Workdir})
	spec.Network = run.Network
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if err := d.Node.Destroy(dctx, sid); err != nil {
			d.Log.Error("remove self-test sandbox", "sandbox", sid, "err", err)
		}
	}()
	if err := d.Node.Start(ctx, spec); err != nil {
		return api.SelfTest{}, fmt.Errorf("start a sandbox of %s: %w", template, err)
	}
	st := api.SelfTest{Time: d.Now(), Results: []api.SelfTestResult{}, Failures: []string{}}
	u := node.Users[run.User]
	for _, t := range tools {
		tool := run
		tool.Argv = []string{"/bin/sh", "-c", t.command}
		err := tool.Validate()
		cid := id.New("cmd")
		if err == nil {
			_, err = d.Node.Exec(ctx, sid, node.ExecSpec{
				ID: cid, Template: template, Argv: tool.Argv, Cwd: "/",
				Env: map[string]string{"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": u.Home}, UID: u.UID, GID: u.GID,
				Timeout: time.Duration(tool.TimeoutS) * time.Second,
			})
		}
		r := api.SelfTestResult{Tool: t.tool}
		if err == nil {
			r.OK, r.Version = output(ctx, d.Node, sid, cid)
		}
		if !r.OK {
			st.Failures = append(st.Failures, t.tool)
		}
		st.Results = append(st.Results, r)
	}
	return st, nil
}

// output waits for a self-test command and returns whether it exited 0
// and the first line it printed.
func output(ctx context.Context, nd Node, sid, cid string) (bool, string) {
	out, err := nd.Output(sid, cid)
	if err != nil {
		return false, ""
	}
	defer out.Close()
	var b strings.Builder
	exit, err := out.Read(ctx, 0, true, func(c node.Chunk) error {
		if b.Len() < 4096 {
			b.Write(c.Data)
		}
		return nil
	})
	line, _, _ := strings.Cut(strings.TrimSpace(b.String()), "\n")
	if len(line) > 200 {
		line = line[:200]
	}
	return err == nil && exit != nil && exit.ExitCode == 0, line
}
