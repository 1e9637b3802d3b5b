package commands_test

import (
	"context"
	"log/slog"
	"maps"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/commands"
	"github.com/cove-dev/cove/internal/control/events"
	"github.com/cove-dev/cove/internal/control/runs"
	"github.com/cove-dev/cove/internal/id"
	"github.com/cove-dev/cove/internal/node"
	"github.com/cove-dev/cove/internal/node/nodetest"
	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/internal/store/sqlite"
)

// core is the fake of the core: sandboxes by ID (activity recorded),
// the change broadcast, no images, secrets from a map, budgets refused
// while refuse is set, and a telemetry hook.
type core struct {
	st store.Store

	mu      sync.Mutex
	touched map[string]time.Time
	exited  int
	refuse  error
	secrets map[string]string
	// onExec runs when a command has started, before command.started is
	// emitted.
	onExec func()
	// lives records the LiveSandbox calls: wake, and how long the call
	// could wait (0: no deadline).
	lives []liveCall
	// actives counts the ActiveSandbox calls.
	actives int
}

type liveCall struct {
	wake bool
	wait time.Duration
}

// LiveSandbox wakes a sandbox at once (it is stored running) unless wake
// is false, which is a conflict.
func (c *core) LiveSandbox(ctx context.Context, teamID, ref string, wake bool) (api.Sandbox, error) {
	var wait time.Duration
	if dl, ok := ctx.Deadline(); ok {
		wait = time.Until(dl)
	}
	c.mu.Lock()
	c.lives = append(c.lives, liveCall{wake, wait})
	c.mu.Unlock()
	sb, err := c.st.GetSandbox(ctx, teamID, ref)
	if err != nil {
		return sb, err
	}
	if !wake {
		return sb, api.Errorf(api.CodeConflict, "sandbox %s is %s and wake=false was given", sb.ID, sb.State)
	}
	sb.State = api.StateRunning
	if err := c.st.UpdateSandbox(ctx, sb); err != nil {
		return sb, err
	}
	return c.st.GetSandbox(ctx, teamID, ref)
}

func (c *core) ActiveSandbox(ctx context.Context, teamID, ref string) (api.Sandbox, error) {
	c.mu.Lock()
	c.actives++
	c.mu.Unlock()
	sb, err := c.st.GetSandbox(ctx, teamID, ref)
	if err == nil {
		c.TouchAt(sb.ID, time.Now())
	}
	return sb, err
}

func (c *core) GetSandbox(ctx context.Context, teamID, ref string) (api.Sandbox, error) {
	return c.st.GetSandbox(ctx, teamID, ref)
}

func (c *core) TouchAt(id string, t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.touched[id] = t
}

func (c *core) Exited() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.exited++
}

func (c *core) Image(string, string) (api.Image, bool) { return api.Image{}, false }
func (c *core) NodeTemplate(_, template string) string { return "node-" + template }
func (c *core) Command(img api.Image, _ api.CreateCommandRequest, _ string, u node.User, env map[string]string) (node.User, map[string]string, error) {
	return u, env, nil
}

func (c *core) Exec(ctx context.Context, sb api.Sandbox, req api.CreateCommandRequest, cmd *api.Command, spec *node.ExecSpec) error {
	refs := maps.Clone(sb.Secrets)
	maps.Copy(refs, req.Secrets)
	values, redact, err := c.Open(ctx, sb.TeamID, refs)
	if err != nil {
		return err
	}
	maps.Copy(spec.Env, values)
	spec.Secrets, cmd.Secrets = redact, req.Secrets
	return nil
}

func (c *core) Open(_ context.Context, _ string, refs map[string]string) (map[string]string, []node.Secret, error) {
	values := map[string]string{}
	var redact []node.Secret
	for k, name := range refs {
		v, ok := c.secrets[name]
		if !ok {
			return nil, nil, api.Errorf(api.CodeNotFound, "secret %q not found", name)
		}
		values[k] = v
		redact = append(redact, node.Secret{Name: name, Value: v})
	}
	return values, redact, nil
}

func (c *core) TeamRefusal(context.Context, string) error { return nil }
func (c *core) SandboxRefusal(context.Context, api.Sandbox) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.refuse
}

// telemetry calls the core's onExec hook.
type telemetry struct{ c *core }

func (t telemetry) Exec(time.Duration) {
	if f := t.c.onExec; f != nil {
		f()
	}
}

type broadcast struct {
	mu      sync.Mutex
	changed chan struct{}
}

func (b *broadcast) Notify() {
	b.mu.Lock()
	defer b.mu.Unlock()
	close(b.changed)
	b.changed = make(chan struct{})
}

func (b *broadcast) Changes() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.changed
}

type noTelemetry struct{}

func (noTelemetry) Event(api.Event) {}

// hookStore is the SQLite store, with a hook on GetCommand and a count
// of the commands' and sandboxes' reads.
type hookStore struct {
	*sqlite.DB
	onGet func()
	// onUpdateEvent, when set, runs before each UpdateCommandEvent.
	onUpdateEvent func()

	mu     sync.Mutex
	reads  map[string]int // "command", "sandbox"
	writes map[string]int // "create", "update", "update+event", "event"
}

func (h *hookStore) GetCommand(ctx context.Context, sandboxID, id string) (api.Command, error) {
	if f := h.onGet; f != nil {
		f()
	}
	h.count("command")
	return h.DB.GetCommand(ctx, sandboxID, id)
}

func (h *hookStore) GetSandbox(ctx context.Context, teamID, id string) (api.Sandbox, error) {
	h.count("sandbox")
	return h.DB.GetSandbox(ctx, teamID, id)
}

func (h *hookStore) CreateCommand(ctx context.Context, c api.Command) error {
	h.countWrite("create")
	return h.DB.CreateCommand(ctx, c)
}

func (h *hookStore) UpdateCommand(ctx context.Context, c api.Command) error {
	h.countWrite("update")
	return h.DB.UpdateCommand(ctx, c)
}

func (h *hookStore) UpdateCommandEvent(ctx context.Context, c api.Command, teamID string, e api.Event) (api.Event, error) {
	h.countWrite("update+event")
	if f := h.onUpdateEvent; f != nil {
		f()
	}
	return h.DB.UpdateCommandEvent(ctx, c, teamID, e)
}

func (h *hookStore) AppendEvent(ctx context.Context, teamID string, e api.Event) (api.Event, error) {
	h.countWrite("event")
	return h.DB.AppendEvent(ctx, teamID, e)
}

func (h *hookStore) countWrite(what string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.writes == nil {
		h.writes = map[string]int{}
	}
	h.writes[what]++
}

// takeWrites returns the writes counted and starts again.
func (h *hookStore) takeWrites() map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	w := h.writes
	h.writes = nil
	return w
}

func (h *hookStore) count(what string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.reads == nil {
		h.reads = map[string]int{}
	}
	h.reads[what]++
}

// takeReads returns the reads counted and starts again.
func (h *hookStore) takeReads() map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.reads
	h.reads = nil
	return r
}

type env struct {
	hooks *hookStore
	svc   *commands.Service
	log   *events.Log
	st    *sqlite.DB
	node  *nodetest.Node
	core  *core
	exits *runs.Exits
	logs  *captured
}

// captured keeps the records logged at Info or above.
type captured struct {
	mu      sync.Mutex
	records []slog.Record
}

func (c *captured) Enabled(context.Context, slog.Level) bool { return true }
func (c *captured) Handle(_ context.Context, r slog.Record) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.records = append(c.records, r)
	return nil
}
func (c *captured) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c *captured) WithGroup(string) slog.Handler      { return c }

// atLeast lists the messages logged at level or above.
func (c *captured) atLeast(level slog.Level) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, r := range c.records {
		if r.Level >= level {
			out = append(out, r.Message)
		}
	}
	return out
}

// newEnv stores team_a with the running sandbox sbx_a (started on the
// fake node) and the terminated sbx_dead, and team_b with sbx_b, and
// builds the service over SQLite, the event log and the fake node. Call
// it in a synctest bubble (or not): its goroutines end at cleanup.
func newEnv(t testing.TB, run nodetest.Command) *env {
	t.Helper()
	ctx := t.Context()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "cove.db"))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	for _, x := range []string{"a", "b"} {
		if err := st.CreateTeam(ctx, api.Team{ID: "team_" + x, Name: x, CreatedAt: now}); err != nil {
			t.Fatal(err)
		}
	}
	for _, sb := range []api.Sandbox{
		{ID: "sbx_a", TeamID: "team_a", State: api.StateRunning, Workdir: "/workspace", Env: map[string]string{"A": "1"}},
		{ID: "sbx_dead", TeamID: "team_a", State: api.StateTerminated, Workdir: "/workspace"},
		{ID: "sbx_asleep", TeamID: "team_a", State: api.StateAsleep, Workdir: "/workspace"},
		{ID: "sbx_b", TeamID: "team_b", State: api.StateRunning, Workdir: "/workspace"},
	} {
		sb.Template, sb.Labels, sb.BudgetAlerts, sb.CreatedAt = "managed", map[string]string{}, []float64{}, now
		if err := st.CreateSandbox(ctx, sb); err != nil {
			t.Fatal(err)
		}
	}
	nd := nodetest.New()
	nd.Run = run
	for _, id := range []string{"sbx_a", "sbx_b", "sbx_asleep"} {
		if err := nd.Start(ctx, node.SandboxSpec{ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	c := &core{st: st, touched: map[string]time.Time{}, secrets: map[string]string{"tok": "s3cret"}}
	logs := &captured{}
	log := slog.New(logs)
	now2 := func() time.Time { return time.Now().UTC() }
	hooks := &hookStore{DB: st}
	evlog := events.New(events.Config{Retention: time.Hour}, hooks, c, &broadcast{changed: make(chan struct{})}, noTelemetry{}, log, now2)
	sctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	svc := commands.New(sctx, &wg, commands.Config{WaitOutputMax: 8}, commands.Deps{
		Store: hooks, Node: nd, Sandboxes: c, Images: c, Secrets: c, Events: evlog, Telemetry: telemetry{c},
		Checks: runs.Checker{Budgets: c}, Log: log, Now: now2,
	})
	exits := runs.NewExits(svc.Exited)
	nd.OnExit = exits.Deliver
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		nd.Close()
		st.Close()
	})
	return &env{hooks: hooks, svc: svc, log: evlog, st: st, node: nd, core: c, exits: exits, logs: logs}
}

// types lists the types of a command's events, oldest first.
func (e *env) types(t *testing.T, teamID, commandID string) []string {
	t.Helper()
	l, err := e.log.ListEvents(t.Context(), teamID, events.Query{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, ev := range l.Items {
		if ev.CommandID == commandID {
			out = append(out, ev.Type)
		}
	}
	return out
}

// TestStartedBeforeExited: a command that ends at once, its exit
// reported while Exec still records its start, has command.started
// before command.exited, and its exit stored.
//
// It runs outside a synctest bubble: the exit waits for the start on a
// mutex, which a bubble does not count as blocked. Exec lingers before
// command.started until the exit report reads the command (the rule is
// broken: the exit did not wait) or 50ms pass (the exit waits, as it
// must; only this passing path waits on the clock).
func TestStartedBeforeExited(t *testing.T) {
	e := newEnv(t, nil) // every command ends at once, exit 0
	read := make(chan struct{})
	var once sync.Once
	e.hooks.onGet = func() { once.Do(func() { close(read) }) }
	delivered := make(chan struct{})
	deliver := e.node.OnExit
	e.node.OnExit = func(runID, commandID string, x node.Exit, lost bool) {
		deliver(runID, commandID, x, lost)
		close(delivered)
	}
	e.core.onExec = func() {
		select {
		case <-read:
			<-delivered
		case <-time.After(50 * time.Millisecond):
		}
	}
	c, err := e.svc.Exec(t.Context(), "team_a", "sbx_a", true, api.CreateCommandRequest{Command: "true"})
	if err != nil {
		t.Fatal(err)
	}
	<-delivered
	if got, want := strings.Join(e.types(t, "team_a", c.ID), ","), "command.started,command.exited"; got != want {
		t.Errorf("events of %s = %s, want %s", c.ID, got, want)
	}
	got, err := e.st.GetCommand(t.Context(), "sbx_a", c.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != api.CommandExited || got.ExitCode == nil || *got.ExitCode != 0 {
		t.Errorf("command = %s exit %v, want exited 0", got.State, got.ExitCode)
	}
	// Its pid, stored before the exit could be, stays with the exit.
	if c.PID != nodetest.FirstPID || got.PID != nodetest.FirstPID {
		t.Errorf("pid answered %d, stored %d; want %d", c.PID, got.PID, nodetest.FirstPID)
	}
	e.core.mu.Lock()
	defer e.core.mu.Unlock()
	if e.core.exited != 1 {
		t.Errorf("core's exit watchers woken %d times, want 1", e.core.exited)
	}
}

// TestExitRouting: the exit of a run with a receiver of its own (a
// workload's program, started through Program) goes to that receiver
// and is not recorded as a sandbox's command; a sandbox's command's exit
// goes to the commands (Exited) and is stored.
func TestExitRouting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, func(ctx context.Context, spec node.ExecSpec, out *nodetest.Output) node.Exit {
			return node.Exit{ExitCode: 7}
		})
		if err := e.node.Start(t.Context(), node.SandboxSpec{ID: "wl_1"}); err != nil {
			t.Fatal(err)
		}
		got := make(chan string, 1)
		defer e.exits.Register("wl_1", runs.ReceiverFunc(func(commandID string, x node.Exit, lost bool) {
			got <- commandID
		}))()
		spec, err := e.svc.Program(t.Context(), "wl_1", runs.Spec{Kind: runs.Workload, TeamID: "team_a", Template: "managed", Command: "exit 7", Workdir: "/workspace"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.node.Exec(t.Context(), "wl_1", spec); err != nil {
			t.Fatal(err)
		}
		if id := <-got; id != "wl_1" {
			t.Errorf("receiver got command %q, want wl_1", id)
		}
		c, err := e.svc.Exec(t.Context(), "team_a", "sbx_a", true, api.CreateCommandRequest{Command: "exit 7"})
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		select {
		case id := <-got:
			t.Errorf("the workload's receiver got the sandbox's command %s", id)
		default:
		}
		l, err := e.st.ListEvents(t.Context(), store.EventFilter{TeamID: "team_a"})
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range l {
			if ev.CommandID == "wl_1" {
				t.Errorf("the workload's exit was recorded as a command: %s", ev.Type)
			}
		}
		stored, err := e.st.GetCommand(t.Context(), "sbx_a", c.ID)
		if err != nil || stored.State != api.CommandExited || stored.ExitCode == nil || *stored.ExitCode != 7 {
			t.Errorf("stored command = %+v, %v; want exited 7", stored, err)
		}
	})
}

// TestForeignExit: on a replica that did not start them, the exit of a
// workload's program (no receiver registered here) and of a run the
// store holds no command for are not logged as errors (nor warnings),
// and record nothing; an exit of a stored command still is recorded.
func TestForeignExit(t *testing.T) {
	e := newEnv(t, nil)
	wl := id.New("wl")
	e.exits.Deliver(wl, wl, node.Exit{ExitCode: 3}, false)
	e.exits.Deliver("sbx_a", "cmd_gone", node.Exit{ExitCode: 1}, false)
	e.exits.Deliver("sbx_a", "cmd_gone", node.Exit{}, true)
	if got := e.logs.atLeast(slog.LevelWarn); len(got) != 0 {
		t.Errorf("foreign exits logged %q, want nothing at warn or above", got)
	}
	l, err := e.st.ListEvents(t.Context(), store.EventFilter{TeamID: "team_a"})
	if err != nil {
		t.Fatal(err)
	}
	if len(l) != 0 {
		t.Errorf("foreign exits recorded %d events, want none", len(l))
	}
}

// TestOutputOfFinishedCommand: a finished command's output is read back
// whole by its stream, each stream of a wait cut at WaitOutputMax (8).
func TestOutputOfFinishedCommand(t *testing.T) {
	tests := []struct {
		name               string
		stdout, stderr     string
		wantOut, wantErr   string
		truncated          bool
		wantOutN, wantErrN int64
	}{
		{"both streams", "hello", "oops", "hello", "oops", false, 5, 4},
		{"cut at the max", "0123456789", "", "01234567", "", true, 10, 0},
		{"stderr alone", "", "e", "", "e", false, 0, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := newEnv(t, func(ctx context.Context, spec node.ExecSpec, out *nodetest.Output) node.Exit {
					out.Write("stdout", []byte(tt.stdout))
					out.Write("stderr", []byte(tt.stderr))
					return node.Exit{ExitCode: 3}
				})
				c, err := e.svc.Exec(t.Context(), "team_a", "sbx_a", true, api.CreateCommandRequest{Command: "x"})
				if err != nil {
					t.Fatal(err)
				}
				synctest.Wait()
				r, err := e.svc.WaitCommand(t.Context(), "team_a", "sbx_a", c.ID)
				if err != nil {
					t.Fatal(err)
				}
				if r.Stdout != tt.wantOut || r.Stderr != tt.wantErr || r.Truncated != tt.truncated {
					t.Errorf("wait = %q, %q, truncated %v; want %q, %q, %v", r.Stdout, r.Stderr, r.Truncated, tt.wantOut, tt.wantErr, tt.truncated)
				}
				if r.Command.State != api.CommandExited || r.Command.ExitCode == nil || *r.Command.ExitCode != 3 {
					t.Errorf("wait's command = %s %v, want exited 3", r.Command.State, r.Command.ExitCode)
				}
				got, out, err := e.svc.CommandOutput(t.Context(), "team_a", "sbx_a", c.ID)
				if err != nil {
					t.Fatal(err)
				}
				defer out.Close()
				if got.StdoutBytes != tt.wantOutN || got.StderrBytes != tt.wantErrN {
					t.Errorf("sizes = %d, %d; want %d, %d", got.StdoutBytes, got.StderrBytes, tt.wantOutN, tt.wantErrN)
				}
				var b strings.Builder
				if _, err := out.Read(t.Context(), 0, false, func(ch node.Chunk) error {
					if ch.Stream == "stdout" {
						b.Write(ch.Data)
					}
					return nil
				}); err != nil {
					t.Fatal(err)
				}
				if b.String() != tt.stdout {
					t.Errorf("recorded stdout = %q, want %q", b.String(), tt.stdout)
				}
			})
		})
	}
}

// TestFinishedCommandRefuses: stdin, a signal and a resize of a command
// that has ended are refused with a conflict that says so; another
// team's command is not found.
func TestFinishedCommandRefuses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, nil)
		c, err := e.svc.Exec(t.Context(), "team_a", "sbx_a", true, api.CreateCommandRequest{Command: "true", Stdin: true, PTY: &api.PTY{Cols: 80, Rows: 24}})
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		tests := []struct {
			name string
			team string
			call func(team string) error
			code api.Code
		}{
			{"stdin", "team_a", func(team string) error {
				return e.svc.Stdin(t.Context(), team, "sbx_a", c.ID, strings.NewReader("x"), true)
			}, api.CodeConflict},
			{"signal", "team_a", func(team string) error { return e.svc.Signal(t.Context(), team, "sbx_a", c.ID, "TERM") }, api.CodeConflict},
			{"resize", "team_a", func(team string) error { return e.svc.Resize(t.Context(), team, "sbx_a", c.ID, 100, 40) }, api.CodeConflict},
			{"other team's", "team_b", func(team string) error { return e.svc.Signal(t.Context(), team, "sbx_a", c.ID, "TERM") }, api.CodeNotFound},
		}
		for _, tt := range tests {
			err := tt.call(tt.team)
			if api.ErrorCode(err) != tt.code {
				t.Errorf("%s: err = %v, want %s", tt.name, err, tt.code)
				continue
			}
			if tt.code == api.CodeConflict && !strings.Contains(err.Error(), "has ended (exited)") {
				t.Errorf("%s: err = %q, want it to say the command has ended", tt.name, err)
			}
		}
	})
}

// TestExecBudget: Exec is refused at the sandbox's (or its team's) spend
// limit through runs.Checker.Budget; a terminated sandbox is not charged
// and answers that it does not run.
func TestExecBudget(t *testing.T) {
	tests := []struct {
		name    string
		ref     string
		refuse  bool
		code    api.Code
		started bool
	}{
		{"under the limit", "sbx_a", false, "", true},
		{"at the limit", "sbx_a", true, api.CodeBudgetExceeded, false},
		{"terminated, at the limit", "sbx_dead", true, api.CodeConflict, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := newEnv(t, nil)
				if tt.refuse {
					e.core.refuse = api.Errorf(api.CodeBudgetExceeded, "sandbox spent it all")
				}
				_, err := e.svc.Exec(t.Context(), "team_a", tt.ref, true, api.CreateCommandRequest{Command: "true"})
				if api.ErrorCode(err) != tt.code || (tt.code == "" && err != nil) {
					t.Errorf("Exec: err = %v, want code %q", err, tt.code)
				}
				synctest.Wait()
				cmds, err := e.st.ListCommands(t.Context(), store.CommandFilter{SandboxID: tt.ref})
				if err != nil {
					t.Fatal(err)
				}
				if started := len(cmds) > 0; started != tt.started {
					t.Errorf("a command was stored: %v, want %v", started, tt.started)
				}
			})
		})
	}
}

// TestExecWake: a command sent to a sandbox that is not running asks the
// core to make it live (wake unless wake is false), within the command's
// timeout when it has one, and runs once it is; a running sandbox is not
// asked about, and a terminated one is refused without a wake.
// TestExecPID: a command's pid is the node's, answered by Exec and
// stored with the command while it runs and after it ends; each command
// of a sandbox has its own.
func TestExecPID(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		e := newEnv(t, func(ctx context.Context, spec node.ExecSpec, out *nodetest.Output) node.Exit {
			select {
			case <-release:
			case <-ctx.Done():
			}
			return node.Exit{}
		})
		var ids []string
		for i := range 2 {
			c, err := e.svc.Exec(t.Context(), "team_a", "sbx_a", true, api.CreateCommandRequest{Command: "sleep 1"})
			if err != nil {
				t.Fatal(err)
			}
			if c.PID != nodetest.FirstPID+i {
				t.Errorf("command %d answered pid %d, want %d", i, c.PID, nodetest.FirstPID+i)
			}
			got, err := e.svc.GetCommand(t.Context(), "team_a", "sbx_a", c.ID)
			if err != nil {
				t.Fatal(err)
			}
			if got.State != api.CommandRunning || got.PID != c.PID {
				t.Errorf("command %d = %s pid %d, want running pid %d", i, got.State, got.PID, c.PID)
			}
			ids = append(ids, c.ID)
		}
		close(release)
		synctest.Wait()
		for i, id := range ids {
			got, err := e.st.GetCommand(t.Context(), "sbx_a", id)
			if err != nil {
				t.Fatal(err)
			}
			if got.State != api.CommandExited || got.PID != nodetest.FirstPID+i {
				t.Errorf("ended command %d = %s pid %d, want exited pid %d", i, got.State, got.PID, nodetest.FirstPID+i)
			}
		}
	})
}

// TestExecTag: a command keeps the tag it was started with; a tag too
// long or not UTF-8 refuses the command and nothing is stored.
func TestExecTag(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, nil)
		c, err := e.svc.Exec(t.Context(), "team_a", "sbx_a", true, api.CreateCommandRequest{Command: "true", Tag: "start-cmd"})
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		got, err := e.st.GetCommand(t.Context(), "sbx_a", c.ID)
		if err != nil || c.Tag != "start-cmd" || got.Tag != "start-cmd" {
			t.Fatalf("tag answered %q, stored %q (%v)", c.Tag, got.Tag, err)
		}
		for _, tag := range []string{strings.Repeat("x", 257), "bad\xff"} {
			_, err := e.svc.Exec(t.Context(), "team_a", "sbx_a", true, api.CreateCommandRequest{Command: "true", Tag: tag})
			if api.ErrorCode(err) != api.CodeInvalidArgument {
				t.Errorf("tag %q: %v; want invalid_argument", tag, err)
			}
		}
		if n, _ := e.st.ListCommands(t.Context(), store.CommandFilter{SandboxID: "sbx_a"}); len(n) != 1 {
			t.Errorf("%d commands stored, want 1", len(n))
		}
		if _, err := e.svc.Exec(t.Context(), "team_a", "sbx_a", true, api.CreateCommandRequest{Command: "true", Tag: strings.Repeat("é", 128)}); err != nil {
			t.Errorf("a tag of 256 bytes: %v", err)
		}
	})
}

func TestExecWake(t *testing.T) {
	tests := []struct {
		name     string
		ref      string
		wake     bool
		timeoutS int64
		code     api.Code
		lives    []liveCall
	}{
		{"running", "sbx_a", true, 0, "", nil},
		{"asleep", "sbx_asleep", true, 0, "", []liveCall{{true, 0}}},
		{"asleep, within timeout_s", "sbx_asleep", true, 30, "", []liveCall{{true, 30 * time.Second}}},
		{"asleep, wake=false", "sbx_asleep", false, 0, api.CodeConflict, []liveCall{{false, 0}}},
		{"terminated", "sbx_dead", true, 0, api.CodeConflict, nil},
		{"another team's", "sbx_b", true, 0, api.CodeNotFound, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := newEnv(t, nil)
				req := api.CreateCommandRequest{Command: "true"}
				if tt.timeoutS > 0 {
					req.TimeoutS = &tt.timeoutS
				}
				c, err := e.svc.Exec(t.Context(), "team_a", tt.ref, tt.wake, req)
				if api.ErrorCode(err) != tt.code || (tt.code == "" && err != nil) {
					t.Fatalf("Exec: err = %v, want code %q", err, tt.code)
				}
				if diff := cmp.Diff(tt.lives, e.core.lives, cmp.AllowUnexported(liveCall{})); diff != "" {
					t.Errorf("LiveSandbox calls (-want +got):\n%s", diff)
				}
				synctest.Wait()
				cmds, err := e.st.ListCommands(t.Context(), store.CommandFilter{SandboxID: tt.ref})
				if err != nil {
					t.Fatal(err)
				}
				if started := len(cmds) > 0; started != (tt.code == "") {
					t.Errorf("a command was stored: %v, want %v", started, tt.code == "")
				}
				if tt.code == "" && c.SandboxID != tt.ref {
					t.Errorf("the command ran in %q, want %q", c.SandboxID, tt.ref)
				}
			})
		})
	}
}

// TestProgram: a workload's program built from its runs.Spec runs as
// its run's ID, in its workdir, as its user, with its env and secrets,
// named by COVE_WORKLOAD_ID (not COVE_SANDBOX_ID), within its timeout;
// an unknown secret refuses it.
func TestProgram(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, nil)
		sp := runs.Spec{
			Kind: runs.Workload, TeamID: "team_a", Template: "managed", Argv: []string{"train", "--fast"},
			Env: map[string]string{"X": "1"}, Secrets: map[string]string{"TOKEN": "tok"}, User: "root",
			Workdir: "/data", TimeoutS: 60,
		}
		spec, err := e.svc.Program(t.Context(), "wl_9", sp)
		if err != nil {
			t.Fatal(err)
		}
		root := node.Users["root"]
		if spec.ID != "wl_9" || spec.Cwd != "/data" || spec.UID != root.UID || spec.Timeout != time.Minute || spec.Template != "node-managed" {
			t.Errorf("spec = %+v", spec)
		}
		for k, v := range map[string]string{"X": "1", "TOKEN": "s3cret", "COVE_WORKLOAD_ID": "wl_9", "USER": "root", "HOME": root.Home} {
			if spec.Env[k] != v {
				t.Errorf("env %s = %q, want %q", k, spec.Env[k], v)
			}
		}
		if _, ok := spec.Env["COVE_SANDBOX_ID"]; ok {
			t.Error("a workload's program is given COVE_SANDBOX_ID")
		}
		if len(spec.Secrets) != 1 || spec.Secrets[0].Value != "s3cret" {
			t.Errorf("redactions = %+v, want the secret's value", spec.Secrets)
		}
		sp.Secrets = map[string]string{"TOKEN": "nope"}
		if _, err := e.svc.Program(t.Context(), "wl_9", sp); api.ErrorCode(err) != api.CodeNotFound {
			t.Errorf("unknown secret: err = %v, want not_found", err)
		}
	})
}

// TestNoOutputAlert: a running command silent for no_output_alert_s
// raises command.no_output once per silence; new output re-arms it.
func TestNoOutputAlert(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		speak := make(chan struct{})
		e := newEnv(t, func(ctx context.Context, spec node.ExecSpec, out *nodetest.Output) node.Exit {
			select {
			case <-speak:
				out.Write("stdout", []byte("tick"))
			case <-ctx.Done():
				return node.Exit{}
			}
			<-ctx.Done()
			return node.Exit{}
		})
		alert := int64(10)
		c, err := e.svc.Exec(t.Context(), "team_a", "sbx_a", true, api.CreateCommandRequest{Command: "x", NoOutputAlertS: &alert})
		if err != nil {
			t.Fatal(err)
		}
		count := func() int {
			synctest.Wait()
			n := 0
			for _, typ := range e.types(t, "team_a", c.ID) {
				if typ == "command.no_output" {
					n++
				}
			}
			return n
		}
		time.Sleep(9 * time.Second)
		if n := count(); n != 0 {
			t.Errorf("after 9 s of silence: %d alerts, want 0", n)
		}
		time.Sleep(time.Second)
		if n := count(); n != 1 {
			t.Errorf("after 10 s of silence: %d alerts, want 1", n)
		}
		time.Sleep(30 * time.Second)
		if n := count(); n != 1 {
			t.Errorf("after 40 s of silence: %d alerts, want 1 (once per silence)", n)
		}
		close(speak)
		time.Sleep(10 * time.Second)
		if n := count(); n != 2 {
			t.Errorf("10 s after new output: %d alerts, want 2 (re-armed)", n)
		}
	})
}

// TestExitOfStartedCommandReadsNothing: the exit of a command this
// service started updates it without reading it or its sandbox again,
// and its event still goes to its team; waiting on it reads the command
// once, when it has ended. Changed elsewhere meanwhile (another replica
// marked it lost), the exit's update is stale: it reads it again and the
// command stays as it ended there.
func TestExitOfStartedCommandReadsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		e := newEnv(t, func(ctx context.Context, spec node.ExecSpec, out *nodetest.Output) node.Exit {
			<-release
			out.Write("stdout", []byte("hi"))
			return node.Exit{ExitCode: 4}
		})
		c, err := e.svc.Exec(t.Context(), "team_a", "sbx_a", true, api.CreateCommandRequest{Command: "x"})
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		e.hooks.takeReads()
		done := make(chan api.CommandResult, 1)
		go func() {
			r, err := e.svc.WaitCommand(t.Context(), "team_a", "sbx_a", c.ID)
			if err != nil {
				t.Error(err)
			}
			done <- r
		}()
		synctest.Wait()
		if got := e.hooks.takeReads(); len(got) != 0 {
			t.Errorf("waiting on a running command read %v, want nothing yet", got)
		}
		close(release)
		synctest.Wait()
		r := <-done
		if r.Stdout != "hi" || r.Command.State != api.CommandExited || r.Command.ExitCode == nil || *r.Command.ExitCode != 4 {
			t.Errorf("wait = %q, %s %v; want hi, exited 4", r.Stdout, r.Command.State, r.Command.ExitCode)
		}
		if got := e.hooks.takeReads(); len(got) != 0 {
			t.Errorf("exit and wait read %v, want nothing", got)
		}
		if got, want := strings.Join(e.types(t, "team_a", c.ID), ","), "command.started,command.exited"; got != want {
			t.Errorf("events = %s, want %s", got, want)
		}
		stored, err := e.st.GetCommand(t.Context(), "sbx_a", c.ID)
		if err != nil || stored.State != api.CommandExited || stored.StdoutBytes != 2 {
			t.Errorf("stored = %+v, %v; want exited with 2 bytes of stdout", stored, err)
		}
		r.Command.Version = stored.Version
		if d := cmp.Diff(stored, r.Command, cmpopts.EquateEmpty()); d != "" {
			t.Errorf("the wait's answer against the store (-stored +answered; nil and empty are the same on the wire):\n%s", d)
		}

		// Marked lost elsewhere before its exit came here.
		release = make(chan struct{})
		c, err = e.svc.Exec(t.Context(), "team_a", "sbx_a", true, api.CreateCommandRequest{Command: "x"})
		if err != nil {
			t.Fatal(err)
		}
		lost, err := e.st.GetCommand(t.Context(), "sbx_a", c.ID)
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now().UTC()
		lost.State, lost.EndedAt = api.CommandLost, &now
		if err := e.st.UpdateCommand(t.Context(), lost); err != nil {
			t.Fatal(err)
		}
		e.hooks.takeReads()
		close(release)
		synctest.Wait()
		if got, want := e.hooks.takeReads(), map[string]int{"command": 1}; !maps.Equal(got, want) {
			t.Errorf("a stale exit read %v, want %v", got, want)
		}
		stored, err = e.st.GetCommand(t.Context(), "sbx_a", c.ID)
		if err != nil || stored.State != api.CommandLost {
			t.Errorf("stored = %+v, %v; want lost as marked elsewhere", stored, err)
		}
		if got, want := strings.Join(e.types(t, "team_a", c.ID), ","), "command.started"; got != want {
			t.Errorf("events = %s, want %s", got, want)
		}
	})
}

// TestWaitBeforeExitStored: a wait that sees a command's end before its
// exit is stored answers it as it is then stored (the same end time),
// without reading it; a wait that comes after answers it as stored.
func TestWaitBeforeExitStored(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, func(ctx context.Context, spec node.ExecSpec, out *nodetest.Output) node.Exit {
			out.Write("stdout", []byte("done"))
			return node.Exit{ExitCode: 7}
		})
		// The pid's write comes first and passes; the exit's waits.
		hold := make(chan struct{})
		var writes atomic.Int32
		e.hooks.onUpdateEvent = func() {
			if writes.Add(1) == 2 {
				<-hold
			}
		}
		c, err := e.svc.Exec(t.Context(), "team_a", "sbx_a", true, api.CreateCommandRequest{Command: "x"})
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // the exit is in the log; its write waits
		time.Sleep(time.Second)
		e.hooks.takeReads()
		r, err := e.svc.WaitCommand(t.Context(), "team_a", "sbx_a", c.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got := e.hooks.takeReads(); len(got) != 0 {
			t.Errorf("the wait read %v, want nothing", got)
		}
		close(hold)
		synctest.Wait()
		stored, err := e.st.GetCommand(t.Context(), "sbx_a", c.ID)
		if err != nil || stored.State != api.CommandExited {
			t.Fatalf("stored = %+v, %v", stored, err)
		}
		r.Command.Version = stored.Version
		if d := cmp.Diff(stored, r.Command, cmpopts.EquateEmpty()); d != "" {
			t.Errorf("the wait's answer against the store (-stored +answered; nil and empty are the same on the wire):\n%s", d)
		}
		after, err := e.svc.WaitCommand(t.Context(), "team_a", "sbx_a", c.ID)
		if err != nil || after.Stdout != "done" {
			t.Fatalf("a later wait = %q, %v", after.Stdout, err)
		}
		if d := cmp.Diff(stored, after.Command, cmpopts.EquateEmpty()); d != "" {
			t.Errorf("a later wait's answer against the store (-stored +answered; nil and empty are the same on the wire):\n%s", d)
		}
	})
}

// TestWaitOtherSandboxesCommand: a command started here is not found
// through another sandbox, nor another team's.
func TestWaitOtherSandboxesCommand(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		defer close(release)
		e := newEnv(t, func(ctx context.Context, spec node.ExecSpec, out *nodetest.Output) node.Exit {
			<-release
			return node.Exit{}
		})
		c, err := e.svc.Exec(t.Context(), "team_a", "sbx_a", true, api.CreateCommandRequest{Command: "x"})
		if err != nil {
			t.Fatal(err)
		}
		for _, tt := range []struct{ team, ref string }{{"team_b", "sbx_b"}, {"team_b", "sbx_a"}} {
			if _, err := e.svc.WaitCommand(t.Context(), tt.team, tt.ref, c.ID); api.ErrorCode(err) != api.CodeNotFound {
				t.Errorf("%s waiting through %s: %v, want not_found", tt.team, tt.ref, err)
			}
		}
	})
}

// TestWaitAfterExecReadsNoSandbox: waiting on a command this service
// started, through its sandbox's ID and by its team, reads neither the
// sandbox nor the command until it ends, and counts as the sandbox's
// activity; once it has ended, or through another team, the sandbox is
// looked up again.
func TestWaitAfterExecReadsNoSandbox(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		e := newEnv(t, func(ctx context.Context, spec node.ExecSpec, out *nodetest.Output) node.Exit {
			<-release
			return node.Exit{ExitCode: 3}
		})
		c, err := e.svc.Exec(t.Context(), "team_a", "sbx_a", true, api.CreateCommandRequest{Command: "x"})
		if err != nil {
			t.Fatal(err)
		}
		e.core.mu.Lock()
		e.core.actives, e.core.touched = 0, map[string]time.Time{}
		e.core.mu.Unlock()
		if _, err := e.svc.WaitCommand(t.Context(), "team_b", "sbx_a", c.ID); api.ErrorCode(err) != api.CodeNotFound {
			t.Errorf("another team's wait: %v, want not_found", err)
		}
		done := make(chan api.CommandResult, 1)
		go func() {
			r, err := e.svc.WaitCommand(t.Context(), "team_a", c.SandboxID, c.ID)
			if err != nil {
				t.Error(err)
			}
			done <- r
		}()
		synctest.Wait()
		e.core.mu.Lock()
		actives, touched := e.core.actives, e.core.touched["sbx_a"]
		e.core.mu.Unlock()
		if actives != 1 {
			t.Errorf("ActiveSandbox called %d times, want once (the other team's wait only)", actives)
		}
		if touched.IsZero() {
			t.Error("the wait did not count as the sandbox's activity")
		}
		close(release)
		synctest.Wait()
		if r := <-done; r.Command.ExitCode == nil || *r.Command.ExitCode != 3 {
			t.Errorf("wait = %+v, want exit 3", r.Command)
		}
		if _, err := e.svc.WaitCommand(t.Context(), "team_a", c.SandboxID, c.ID); err != nil {
			t.Fatal(err)
		}
		e.core.mu.Lock()
		actives = e.core.actives
		e.core.mu.Unlock()
		if actives != 2 {
			t.Errorf("ActiveSandbox called %d times, want twice (the wait on the ended command looks it up)", actives)
		}
	})
}

// TestExecDerivedID: a first attempt of an idempotent request starts its
// command under the derived ID without looking for it; an attempt that
// took the claim over (resumed) finds the first attempt's command and
// answers it without starting it again.
func TestExecDerivedID(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		defer close(release)
		var mu sync.Mutex
		runs := 0
		e := newEnv(t, func(ctx context.Context, spec node.ExecSpec, out *nodetest.Output) node.Exit {
			mu.Lock()
			runs++
			mu.Unlock()
			<-release
			return node.Exit{}
		})
		seed, at := []byte("seed"), time.Now()
		first := id.WithDerivation(t.Context(), id.NewDerivation(seed, "team_a", "k", at))
		e.hooks.takeReads()
		c, err := e.svc.Exec(first, "team_a", "sbx_a", true, api.CreateCommandRequest{Command: "x"})
		if err != nil {
			t.Fatal(err)
		}
		if want := id.NewDerivation(seed, "team_a", "k", at).Next("cmd"); c.ID != want {
			t.Errorf("command %s, want the derived %s", c.ID, want)
		}
		synctest.Wait()
		if got := e.hooks.takeReads(); len(got) != 0 {
			t.Errorf("a first attempt read %v, want nothing", got)
		}
		again := id.WithDerivation(t.Context(), id.NewDerivation(seed, "team_a", "k", at).Resume())
		c2, err := e.svc.Exec(again, "team_a", "sbx_a", true, api.CreateCommandRequest{Command: "x"})
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		mu.Lock()
		n := runs
		mu.Unlock()
		if c2.ID != c.ID || n != 1 {
			t.Errorf("the resumed attempt answered %s after %d runs; want %s, run once", c2.ID, n, c.ID)
		}
	})
}

// TestCommandWrites: a command's round trip writes the store three
// times: its insert, then its pid with command.started, then its exit
// with command.exited, each pair in one transaction. The exit of a
// command started elsewhere (another replica's) is stored with its event
// to its sandbox's team too.
func TestCommandWrites(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		e := newEnv(t, func(ctx context.Context, spec node.ExecSpec, out *nodetest.Output) node.Exit {
			<-release
			return node.Exit{ExitCode: 2}
		})
		c, err := e.svc.Exec(t.Context(), "team_a", "sbx_a", true, api.CreateCommandRequest{Command: "x"})
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if got, want := e.hooks.takeWrites(), map[string]int{"create": 1, "update+event": 1}; !maps.Equal(got, want) {
			t.Errorf("a start wrote %v, want %v", got, want)
		}
		close(release)
		synctest.Wait()
		if got, want := e.hooks.takeWrites(), map[string]int{"update+event": 1}; !maps.Equal(got, want) {
			t.Errorf("an exit wrote %v, want %v", got, want)
		}
		if got, want := strings.Join(e.types(t, "team_a", c.ID), ","), "command.started,command.exited"; got != want {
			t.Errorf("events = %s, want %s", got, want)
		}
		stored, err := e.st.GetCommand(t.Context(), "sbx_a", c.ID)
		if err != nil || stored.State != api.CommandExited || stored.PID != nodetest.FirstPID || stored.ExitCode == nil || *stored.ExitCode != 2 {
			t.Errorf("stored = %+v, %v; want exited 2 with its pid", stored, err)
		}

		other := api.Command{ID: id.New("cmd"), SandboxID: "sbx_a", State: api.CommandRunning, StartedAt: time.Now().UTC(), Version: 1}
		if err := e.st.CreateCommand(t.Context(), other); err != nil {
			t.Fatal(err)
		}
		e.exits.Deliver("sbx_a", other.ID, node.Exit{ExitCode: 5}, false)
		if got, want := e.hooks.takeWrites(), map[string]int{"update+event": 1}; !maps.Equal(got, want) {
			t.Errorf("another replica's command's exit wrote %v, want %v", got, want)
		}
		if got, want := strings.Join(e.types(t, "team_a", other.ID), ","), "command.exited"; got != want {
			t.Errorf("events of another replica's command = %s, want %s", got, want)
		}
		stored, err = e.st.GetCommand(t.Context(), "sbx_a", other.ID)
		if err != nil || stored.State != api.CommandExited || stored.ExitCode == nil || *stored.ExitCode != 5 {
			t.Errorf("stored = %+v, %v; want exited 5", stored, err)
		}
	})
}
