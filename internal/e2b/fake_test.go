package e2b

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/commands"
	"github.com/cove-dev/cove/internal/control/lifecycle"
	"github.com/cove-dev/cove/internal/control/meter"
	"github.com/cove-dev/cove/internal/control/teams"
	"github.com/cove-dev/cove/internal/node"
)

// fakePlane is the control plane in memory: sandboxes move between
// states at once, and keys are "key-<team>".
type fakePlane struct {
	now func() time.Time

	mu        sync.Mutex
	sandboxes []api.Sandbox
	created   []api.CreateSandboxRequest
	opts      []lifecycle.CreateOptions
}

func (f *fakePlane) Authenticate(_ context.Context, key string) (teams.Principal, error) {
	if team, ok := strings.CutPrefix(key, "key-"); ok && team != "" {
		return teams.Principal{Team: api.Team{ID: team, Name: team}}, nil
	}
	return teams.Principal{}, api.Errorf(api.CodeUnauthenticated, "the API key is not valid")
}

func (f *fakePlane) find(teamID, ref string) (int, error) {
	for i, sb := range f.sandboxes {
		if sb.TeamID == teamID && sb.ID == ref {
			return i, nil
		}
	}
	return 0, api.Errorf(api.CodeNotFound, "sandbox %s not found", ref)
}

func (f *fakePlane) CreateSandboxWith(_ context.Context, teamID string, req api.CreateSandboxRequest, opts lifecycle.CreateOptions) (api.Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.created = append(f.created, req)
	f.opts = append(f.opts, opts)
	sb := api.Sandbox{
		ID: "sbx_" + strconv.Itoa(len(f.sandboxes)+1), TeamID: teamID, Template: req.Template, State: api.StateCreating,
		Resources: api.Resources{CPUs: 0.5, MemoryMiB: 512, DiskMiB: 1024}, Labels: req.Labels, CreatedAt: f.now(),
		Env: req.Env,
	}
	if req.MaxLifetimeS != nil && *req.MaxLifetimeS > 0 {
		sb.MaxLifetimeS = *req.MaxLifetimeS
		t := sb.CreatedAt.Add(time.Duration(sb.MaxLifetimeS) * time.Second)
		sb.ExpiresAt = &t
	}
	f.sandboxes = append(f.sandboxes, sb)
	return sb, nil
}

func (f *fakePlane) GetSandbox(_ context.Context, teamID, ref string) (api.Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	i, err := f.find(teamID, ref)
	if err != nil {
		return api.Sandbox{}, err
	}
	return f.sandboxes[i], nil
}

// WaitSandbox moves a sandbox on to the state waited for, as the node
// would.
func (f *fakePlane) WaitSandbox(_ context.Context, teamID, ref string, want api.SandboxState, _ time.Duration) (api.Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	i, err := f.find(teamID, ref)
	if err != nil {
		return api.Sandbox{}, err
	}
	sb := &f.sandboxes[i]
	switch {
	case want == api.StateRunning && (sb.State == api.StateCreating || sb.State == api.StateWaking):
		sb.State = api.StateRunning
	case want == api.StateAsleep && sb.State == api.StateSleeping:
		sb.State = api.StateAsleep
	}
	return *sb, nil
}

func (f *fakePlane) ListSandboxes(_ context.Context, teamID string, q lifecycle.SandboxQuery) (api.List[api.Sandbox], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out api.List[api.Sandbox]
	limit := q.Limit
	if limit == 0 {
		limit = 100
	}
	for _, sb := range f.sandboxes {
		if sb.TeamID != teamID || sb.ID <= q.Cursor || (len(q.States) > 0 && !slices.Contains(q.States, sb.State)) {
			continue
		}
		match := true
		for k, v := range q.Labels {
			match = match && sb.Labels[k] == v
		}
		if !match {
			continue
		}
		if len(out.Items) == limit {
			out.NextCursor = out.Items[len(out.Items)-1].ID
			break
		}
		out.Items = append(out.Items, sb)
	}
	return out, nil
}

func (f *fakePlane) UpdateSandbox(_ context.Context, teamID, ref string, req api.UpdateSandboxRequest) (api.Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	i, err := f.find(teamID, ref)
	if err != nil {
		return api.Sandbox{}, err
	}
	sb := &f.sandboxes[i]
	if req.MaxLifetimeS != nil {
		sb.MaxLifetimeS = *req.MaxLifetimeS
		t := sb.CreatedAt.Add(time.Duration(sb.MaxLifetimeS) * time.Second)
		sb.ExpiresAt = &t
	}
	return *sb, nil
}

func (f *fakePlane) setState(teamID, ref string, from []api.SandboxState, to api.SandboxState) (api.Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	i, err := f.find(teamID, ref)
	if err != nil {
		return api.Sandbox{}, err
	}
	sb := &f.sandboxes[i]
	if !slices.Contains(from, sb.State) {
		return api.Sandbox{}, api.Errorf(api.CodeConflict, "sandbox %s is %s", ref, sb.State)
	}
	sb.State = to
	return *sb, nil
}

func (f *fakePlane) TerminateSandbox(_ context.Context, teamID, ref string) (api.Sandbox, error) {
	all := []api.SandboxState{api.StateCreating, api.StateRunning, api.StateSleeping, api.StateAsleep, api.StateWaking, api.StateTerminated}
	return f.setState(teamID, ref, all, api.StateTerminated)
}

func (f *fakePlane) SleepSandbox(_ context.Context, teamID, ref, _ string) (api.Sandbox, error) {
	return f.setState(teamID, ref, []api.SandboxState{api.StateRunning}, api.StateSleeping)
}

func (f *fakePlane) WakeSandbox(_ context.Context, teamID, ref string) (api.Sandbox, error) {
	return f.setState(teamID, ref, []api.SandboxState{api.StateAsleep}, api.StateWaking)
}

func (f *fakePlane) Metrics(_ context.Context, teamID, ref string, q meter.MetricsQuery) (api.Metrics, error) {
	if _, err := f.GetSandbox(context.Background(), teamID, ref); err != nil {
		return api.Metrics{}, err
	}
	return api.Metrics{SandboxID: ref, Samples: []api.MetricSample{
		{Time: time.Unix(1000, 0), CPUMillicores: 250, MemoryBytes: 100 << 20, DiskBytes: 10 << 20},
	}}, nil
}

// fakeCommands are the sandboxes' commands in memory: Exec records,
// giving each command of a sandbox the next pid from firstPID, as a pid
// namespace of its own would; Signal ends a command, and no output is
// kept.
// firstPID is the pid of a sandbox's first command in the fake.
const firstPID = 100

type fakeCommands struct {
	mu       sync.Mutex
	cmds     []api.Command
	signals  []string
	stdin    []string
	execUser []string
	// woke is set once a command was started with wake true.
	woke bool
}

func (f *fakeCommands) Exec(_ context.Context, teamID, ref string, wake bool, req api.CreateCommandRequest) (api.Command, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.woke = f.woke || wake
	pid := firstPID
	for _, c := range f.cmds {
		if c.SandboxID == ref {
			pid++
		}
	}
	c := api.Command{ID: "cmd_" + strconv.Itoa(len(f.cmds)+1), SandboxID: ref, Argv: req.Argv, Cwd: req.Cwd, Env: req.Env,
		User: req.User, Stdin: req.Stdin, State: api.CommandRunning, PTY: req.PTY, PID: pid, Tag: req.Tag}
	f.cmds = append(f.cmds, c)
	f.execUser = append(f.execUser, req.User)
	return c, nil
}

func (f *fakeCommands) GetCommand(_ context.Context, teamID, ref, id string) (api.Command, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.cmds {
		if c.SandboxID == ref && c.ID == id {
			return c, nil
		}
	}
	return api.Command{}, api.Errorf(api.CodeNotFound, "command %s not found", id)
}

func (f *fakeCommands) ListCommands(_ context.Context, teamID, ref string, q commands.Query) (api.List[api.Command], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out api.List[api.Command]
	for _, c := range f.cmds {
		if c.SandboxID == ref && c.ID > q.Cursor && (len(q.States) == 0 || slices.Contains(q.States, c.State)) {
			out.Items = append(out.Items, c)
		}
	}
	return out, nil
}

func (f *fakeCommands) CommandOutput(_ context.Context, teamID, ref, id string) (api.Command, node.Output, error) {
	return api.Command{}, nil, api.Errorf(api.CodeNotFound, "no output in the fake")
}

func (f *fakeCommands) Stdin(_ context.Context, teamID, ref, id string, r io.Reader, eof bool) error {
	b, _ := io.ReadAll(r)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stdin = append(f.stdin, fmt.Sprintf("%s:%q:%v", id, b, eof))
	return nil
}

func (f *fakeCommands) Signal(_ context.Context, teamID, ref, id, sig string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range f.cmds {
		if f.cmds[i].SandboxID == ref && f.cmds[i].ID == id {
			if f.cmds[i].State.Done() {
				return api.Errorf(api.CodeConflict, "command %s has ended", id)
			}
			f.cmds[i].State = api.CommandKilled
			f.signals = append(f.signals, id+":"+sig)
			return nil
		}
	}
	return api.Errorf(api.CodeNotFound, "command %s not found", id)
}

func (f *fakeCommands) Resize(_ context.Context, teamID, ref, id string, cols, rows int) error {
	return nil
}
