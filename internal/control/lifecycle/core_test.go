package lifecycle_test

import (
	"context"
	"errors"
	"github.com/cove-dev/cove/internal/control/files"
	"github.com/cove-dev/cove/internal/service"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/lifecycle"
	"github.com/cove-dev/cove/internal/node"
	"github.com/cove-dev/cove/internal/node/nodetest"
	"github.com/cove-dev/cove/internal/secrets"
	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/internal/store/sqlite"
)

// The control plane over the real SQLite store and a fake node: life
// cycles, tenancy and bookkeeping, without root or runc.

var _ lifecycle.Node = (*nodetest.Node)(nil)

type harness struct {
	srv *lifecycle.Core
	// plane is the whole control plane, wired as the service wires it.
	plane *service.Plane
	st    *sqlite.DB
	node  *nodetest.Node
	// Two teams: a and b.
	a, b string
	// admin is the admin team's principal.
	admin lifecycle.Principal
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	return newHarnessWith(t, func(*lifecycle.Config) {})
}

// newHarnessWith is newHarness with a configuration changed by edit.
func newHarnessWith(t testing.TB, edit func(*lifecycle.Config)) *harness {
	t.Helper()
	return newHarnessOver(t, func(st store.Store) store.Store { return st }, edit)
}

// newHarnessOver is newHarnessWith over the store wrap makes of the
// SQLite store (one that fails on demand, say); h.st stays SQLite's.
func newHarnessOver(t testing.TB, wrap func(store.Store) store.Store, edit func(*lifecycle.Config)) *harness {
	t.Helper()
	ctx := t.Context()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "cove.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	cfg := lifecycle.DefaultConfig()
	cfg.Templates = []string{"managed", "other"}
	cfg.WarmPool = 0
	cfg.Secrets = secrets.NewKeyring(newKey(t))
	edit(&cfg)
	plane, err := service.NewPlane(cfg, wrap(st), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	srv := plane.Core
	nd := nodetest.New()
	nd.OnExit = srv.OnExit
	plane.SetNode(nd)
	// The server's goroutines may call the node: the node closes after.
	t.Cleanup(nd.Close)
	t.Cleanup(srv.Close)
	key, err := plane.Teams.Bootstrap(ctx)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := plane.Teams.Authenticate(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{srv: srv, plane: plane, st: st, node: nd, admin: admin}
	for _, name := range []string{"team-a", "team-b"} {
		resp, err := plane.Teams.CreateTeam(ctx, admin, api.CreateTeamRequest{Name: name})
		if err != nil {
			t.Fatal(err)
		}
		if name == "team-a" {
			h.a = resp.Team.ID
		} else {
			h.b = resp.Team.ID
		}
	}
	return h
}

// running creates a sandbox for team and waits until it runs.
func (h *harness) running(t *testing.T, team, name string) api.Sandbox {
	t.Helper()
	sb, err := h.srv.CreateSandbox(t.Context(), team, api.CreateSandboxRequest{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	return h.wait(t, team, sb.ID, api.StateRunning)
}

func (h *harness) wait(t *testing.T, team, ref string, want api.SandboxState) api.Sandbox {
	t.Helper()
	sb, err := h.srv.WaitSandbox(t.Context(), team, ref, want, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if sb.State != want {
		t.Fatalf("sandbox %s is %s (%s), want %s", ref, sb.State, sb.StateReason, want)
	}
	return sb
}

func (h *harness) events(t *testing.T, team, sandboxID string) []string {
	t.Helper()
	l, err := h.plane.Events.ListEvents(t.Context(), team, lifecycle.EventQuery{Sandbox: sandboxID, Page: lifecycle.Page{Limit: 1000}})
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, e := range l.Items {
		types = append(types, e.Type)
	}
	return types
}

// eventsUntil is events once they include typ, for a step whose event is
// appended just after its state is stored.
func (h *harness) eventsUntil(t *testing.T, team, sandboxID, typ string) []string {
	t.Helper()
	for range 500 {
		if ev := h.events(t, team, sandboxID); slices.Contains(ev, typ) {
			return ev
		}
		time.Sleep(10 * time.Millisecond)
	}
	return h.events(t, team, sandboxID)
}

func wantCode(t *testing.T, err error, code api.Code) {
	t.Helper()
	if api.ErrorCode(err) != code {
		t.Fatalf("err = %v (code %q), want code %q", err, api.ErrorCode(err), code)
	}
}

func TestLifeCycle(t *testing.T) {
	h := newHarness(t)
	ctx := t.Context()
	sb := h.running(t, h.a, "life")
	if sb.StartedAt == nil || sb.Template != "managed" || sb.Workdir != "/workspace" {
		t.Fatalf("running sandbox = %+v", sb)
	}
	got, ok := h.node.Sandbox(sb.ID)
	if !ok || got.Spec.Hostname != "life" || got.Spec.Resources != sb.Resources || got.Spec.Pids != lifecycle.DefaultConfig().PidsLimit {
		t.Fatalf("node has %+v, %v", got, ok)
	}

	if _, err := h.srv.SleepSandbox(ctx, h.a, "life", "test"); err != nil {
		t.Fatal(err)
	}
	h.wait(t, h.a, sb.ID, api.StateAsleep)
	if got, _ := h.node.Sandbox(sb.ID); got.State != nodetest.Saved {
		t.Fatalf("node state after sleep = %q", got.State)
	}
	// A command with wake=false does not wake it.
	_, err := h.plane.Commands.Exec(ctx, h.a, sb.ID, false, api.CreateCommandRequest{Command: "true"})
	wantCode(t, err, api.CodeConflict)

	if _, err := h.srv.WakeSandbox(ctx, h.a, sb.ID); err != nil {
		t.Fatal(err)
	}
	woke := h.wait(t, h.a, sb.ID, api.StateRunning)
	if woke.ID != sb.ID || woke.Name != "life" {
		t.Fatalf("woken sandbox = %+v", woke)
	}

	if _, err := h.srv.TerminateSandbox(ctx, h.a, sb.ID); err != nil {
		t.Fatal(err)
	}
	h.wait(t, h.a, sb.ID, api.StateTerminated)
	if _, ok := h.node.Sandbox(sb.ID); ok {
		t.Fatal("the node still has the terminated sandbox")
	}
	// Terminating again is a no-op; waking a terminated sandbox is not.
	if _, err := h.srv.TerminateSandbox(ctx, h.a, sb.ID); err != nil {
		t.Fatal(err)
	}
	_, err = h.srv.WakeSandbox(ctx, h.a, sb.ID)
	wantCode(t, err, api.CodeConflict)

	want := []string{
		"sandbox.creating", "sandbox.running", "sandbox.sleeping", "sandbox.asleep",
		"sandbox.waking", "sandbox.running", "sandbox.terminating", "sandbox.terminated",
	}
	if got := h.events(t, h.a, sb.ID); !slices.Equal(got, want) {
		t.Fatalf("events = %v, want %v", got, want)
	}
	wantCalls := []string{"admit " + sb.ID, "start " + sb.ID, "sleep " + sb.ID, "wake " + sb.ID, "drop-save " + sb.ID, "destroy " + sb.ID}
	if got := h.node.Calls(); !slices.Equal(got, wantCalls) {
		t.Fatalf("node calls = %v, want %v", got, wantCalls)
	}
}

func TestStartFails(t *testing.T) {
	tests := []struct {
		name       string
		err        error
		wantReason string
		hidden     string
	}{
		{"coded", api.Errorf(api.CodeResourceExhausted, "no room for 4 GiB"), "start failed: no room for 4 GiB", ""},
		{"internal", errors.New("mount /var/lib/cove/sandboxes/x/rootfs: runc said: boom"), "start failed: internal error on the node", "/var/lib/cove"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			h.node.Fail("start", tt.err)
			sb, err := h.srv.CreateSandbox(t.Context(), h.a, api.CreateSandboxRequest{})
			if err != nil {
				t.Fatal(err)
			}
			sb = h.wait(t, h.a, sb.ID, api.StateFailed)
			if !strings.HasPrefix(sb.StateReason, tt.wantReason) {
				t.Fatalf("state_reason = %q, want it to start with %q", sb.StateReason, tt.wantReason)
			}
			if tt.hidden != "" && strings.Contains(sb.StateReason, tt.hidden) {
				t.Fatalf("state_reason %q shows host detail %q", sb.StateReason, tt.hidden)
			}
			// The failed start was cleaned up on the node.
			if calls := h.node.Calls(); !slices.Contains(calls, "destroy "+sb.ID) {
				t.Fatalf("node calls = %v, want a destroy", calls)
			}
		})
	}
}

func TestTerminateWhileStarting(t *testing.T) {
	h := newHarness(t)
	h.node.StartGate = make(chan struct{}) // never opened: the start hangs
	sb, err := h.srv.CreateSandbox(t.Context(), h.a, api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.srv.TerminateSandbox(t.Context(), h.a, sb.ID); err != nil {
		t.Fatal(err)
	}
	sb = h.wait(t, h.a, sb.ID, api.StateTerminated)
	if sb.StartedAt != nil {
		t.Fatalf("a sandbox terminated while starting has started_at %v", sb.StartedAt)
	}
}

func TestWakeFailsStaysAsleep(t *testing.T) {
	h := newHarness(t)
	sb := h.running(t, h.a, "")
	if _, err := h.srv.SleepSandbox(t.Context(), h.a, sb.ID, ""); err != nil {
		t.Fatal(err)
	}
	h.wait(t, h.a, sb.ID, api.StateAsleep)
	h.node.Fail("wake", errors.New("restore /var/lib/cove/saves/x: checksum mismatch"))
	if _, err := h.srv.WakeSandbox(t.Context(), h.a, sb.ID); err != nil {
		t.Fatal(err)
	}
	// The wake fails in the background; the sandbox ends asleep again.
	got := h.wait(t, h.a, sb.ID, api.StateAsleep)
	if !strings.HasPrefix(got.StateReason, "wake failed") || strings.Contains(got.StateReason, "/var/lib") {
		t.Fatalf("state_reason %q: want a failed wake, without host paths", got.StateReason)
	}
	h.node.Fail("wake", nil)
	if _, err := h.srv.WakeSandbox(t.Context(), h.a, sb.ID); err != nil {
		t.Fatal(err)
	}
	h.wait(t, h.a, sb.ID, api.StateRunning)
}

func TestExec(t *testing.T) {
	h := newHarness(t)
	h.node.Run = func(ctx context.Context, spec node.ExecSpec, out *nodetest.Output) node.Exit {
		out.Write("stdout", []byte("out:"+spec.Shell))
		out.Write("stderr", []byte("err"))
		return node.Exit{ExitCode: 3}
	}
	sb := h.running(t, h.a, "exec")
	res, err := h.plane.Commands.Exec(t.Context(), h.a, "exec", true, api.CreateCommandRequest{
		Command: "echo hi", Env: map[string]string{"A": "1"}, TimeoutS: ptr[int64](5),
		PTY: &api.PTY{Cols: 80, Rows: 24},
	})
	if err != nil {
		t.Fatal(err)
	}
	done, err := h.plane.Commands.WaitCommand(t.Context(), h.a, sb.ID, res.ID)
	if err != nil {
		t.Fatal(err)
	}
	c := done.Command
	if c.State != api.CommandExited || c.ExitCode == nil || *c.ExitCode != 3 || done.Stdout != "out:echo hi" || done.Stderr != "err" {
		t.Fatalf("command = %+v, stdout %q, stderr %q", c, done.Stdout, done.Stderr)
	}
	got, _ := h.node.Sandbox(sb.ID)
	spec := got.Commands[0]
	// The node gets its own spec: units and the environment made here.
	if spec.Timeout != 5*time.Second || spec.Template != "managed" || spec.UID != 1000 || spec.Env["A"] != "1" ||
		spec.Env["HOME"] != "/home/user" || spec.Env["COVE_SANDBOX_ID"] != sb.ID || spec.Env["TERM"] == "" ||
		spec.PTY == nil || !spec.Stdin || spec.Cwd != "/workspace" {
		t.Fatalf("exec spec = %+v", spec)
	}

	// Bad commands never reach the node.
	calls := len(h.node.Calls())
	for _, req := range []api.CreateCommandRequest{
		{},
		{Command: "x", Argv: []string{"x"}},
		{Argv: []string{""}},
		{Command: "x", User: "nobody"},
		{Command: "x", TimeoutS: ptr[int64](-1)},
		{Command: "x", Cwd: "relative"},
	} {
		_, err := h.plane.Commands.Exec(t.Context(), h.a, sb.ID, true, req)
		wantCode(t, err, api.CodeInvalidArgument)
	}
	if n := len(h.node.Calls()); n != calls {
		t.Fatalf("invalid commands made %d node calls", n-calls)
	}

	// A command the node refuses does not linger as running.
	h.node.Fail("exec", api.Errorf(api.CodeResourceExhausted, "no more processes"))
	_, err = h.plane.Commands.Exec(t.Context(), h.a, sb.ID, true, api.CreateCommandRequest{Command: "true"})
	wantCode(t, err, api.CodeResourceExhausted)
	l, err := h.plane.Commands.ListCommands(t.Context(), h.a, sb.ID, lifecycle.CommandQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Items) != 1 {
		t.Fatalf("commands = %+v, want only the one that ran", l.Items)
	}

	// WaitCommand answers from the log, which has the exit just before the
	// store and the event log do: wait for command.exited.
	want := []string{"sandbox.creating", "sandbox.running", "command.started", "command.exited"}
	deadline := time.Now().Add(10 * time.Second)
	for got := h.events(t, h.a, sb.ID); !slices.Equal(got, want); got = h.events(t, h.a, sb.ID) {
		if time.Now().After(deadline) {
			t.Fatalf("events = %v, want %v", got, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestSleepLosesRunningCommands(t *testing.T) {
	h := newHarness(t)
	h.node.Run = func(ctx context.Context, spec node.ExecSpec, out *nodetest.Output) node.Exit {
		<-ctx.Done() // runs until lost
		return node.Exit{}
	}
	sb := h.running(t, h.a, "")
	c, err := h.plane.Commands.Exec(t.Context(), h.a, sb.ID, true, api.CreateCommandRequest{Command: "sleep 1000"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.srv.SleepSandbox(t.Context(), h.a, sb.ID, ""); err != nil {
		t.Fatal(err)
	}
	h.wait(t, h.a, sb.ID, api.StateAsleep)
	got, err := h.plane.Commands.GetCommand(t.Context(), h.a, sb.ID, c.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != api.CommandLost || got.EndedAt == nil {
		t.Fatalf("command after sleep = %+v, want lost", got)
	}
}

func TestPaging(t *testing.T) {
	h := newHarness(t)
	var ids []string
	for range 5 {
		sb, err := h.srv.CreateSandbox(t.Context(), h.a, api.CreateSandboxRequest{})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, sb.ID)
	}
	h.running(t, h.b, "") // another team's: never listed
	var seen []string
	q := lifecycle.SandboxQuery{Page: lifecycle.Page{Limit: 2}}
	for pages := 0; ; pages++ {
		if pages > 5 {
			t.Fatal("paging does not end")
		}
		l, err := h.srv.ListSandboxes(t.Context(), h.a, q)
		if err != nil {
			t.Fatal(err)
		}
		for _, sb := range l.Items {
			seen = append(seen, sb.ID)
		}
		if l.NextCursor == "" {
			break
		}
		q.Cursor = l.NextCursor
	}
	// Lists are in ID order, which is creation order but for IDs made in
	// the same millisecond.
	slices.Sort(ids)
	if !slices.Equal(seen, ids) {
		t.Fatalf("paged %v, want %v", seen, ids)
	}
	for _, limit := range []int{-1, lifecycle.MaxPageLimit + 1} {
		_, err := h.srv.ListSandboxes(t.Context(), h.a, lifecycle.SandboxQuery{Page: lifecycle.Page{Limit: limit}})
		wantCode(t, err, api.CodeInvalidArgument)
	}
	_, err := h.srv.ListSandboxes(t.Context(), h.a, lifecycle.SandboxQuery{States: []api.SandboxState{"dreaming"}})
	wantCode(t, err, api.CodeInvalidArgument)
}

// TestTenancy calls every method that takes a sandbox or a command with
// team b's credentials on team a's resources: each answers not_found and
// nothing reaches the node.
func TestTenancy(t *testing.T) {
	h := newHarness(t)
	ctx := t.Context()
	h.node.Run = func(ctx context.Context, spec node.ExecSpec, out *nodetest.Output) node.Exit {
		<-ctx.Done()
		return node.Exit{}
	}
	sb := h.running(t, h.a, "mine")
	c, err := h.plane.Commands.Exec(ctx, h.a, sb.ID, true, api.CreateCommandRequest{Command: "sleep 1000", Stdin: true})
	if err != nil {
		t.Fatal(err)
	}
	before := len(h.node.Calls())
	other := h.b
	ft := func(ref string) files.Target { return files.Target{TeamID: other, Ref: ref, Wake: true} }
	calls := map[string]func(ref string) error{
		"GetSandbox": func(ref string) error { _, err := h.srv.GetSandbox(ctx, other, ref); return err },
		"WaitSandbox": func(ref string) error {
			_, err := h.srv.WaitSandbox(ctx, other, ref, api.StateRunning, time.Second)
			return err
		},
		"UpdateSandbox": func(ref string) error {
			_, err := h.srv.UpdateSandbox(ctx, other, ref, api.UpdateSandboxRequest{})
			return err
		},
		"TerminateSandbox": func(ref string) error { _, err := h.srv.TerminateSandbox(ctx, other, ref); return err },
		"SleepSandbox":     func(ref string) error { _, err := h.srv.SleepSandbox(ctx, other, ref, ""); return err },
		"WakeSandbox":      func(ref string) error { _, err := h.srv.WakeSandbox(ctx, other, ref); return err },
		"LiveSandbox":      func(ref string) error { _, err := h.srv.LiveSandbox(ctx, other, ref, true); return err },
		"Network":          func(ref string) error { _, err := h.plane.Observations.Network(ctx, other, ref); return err },
		"Exec": func(ref string) error {
			_, err := h.plane.Commands.Exec(ctx, other, ref, true, api.CreateCommandRequest{Command: "id"})
			return err
		},
		"ListCommands": func(ref string) error {
			_, err := h.plane.Commands.ListCommands(ctx, other, ref, lifecycle.CommandQuery{})
			return err
		},
		"GetCommand":    func(ref string) error { _, err := h.plane.Commands.GetCommand(ctx, other, ref, c.ID); return err },
		"WaitCommand":   func(ref string) error { _, err := h.plane.Commands.WaitCommand(ctx, other, ref, c.ID); return err },
		"CommandOutput": func(ref string) error { _, _, err := h.plane.Commands.CommandOutput(ctx, other, ref, c.ID); return err },
		"Stdin": func(ref string) error {
			return h.plane.Commands.Stdin(ctx, other, ref, c.ID, strings.NewReader("x"), false)
		},
		"Signal": func(ref string) error { return h.plane.Commands.Signal(ctx, other, ref, c.ID, "TERM") },
		"Resize": func(ref string) error { return h.plane.Commands.Resize(ctx, other, ref, c.ID, 80, 24) },
		"ListEvents": func(ref string) error {
			_, err := h.plane.Events.ListEvents(ctx, other, lifecycle.EventQuery{Sandbox: ref})
			return err
		},
		"StatFile": func(ref string) error { _, err := h.plane.Files.StatFile(ctx, ft(ref), "/etc/passwd"); return err },
		"ListFiles": func(ref string) error {
			_, err := h.plane.Files.ListFiles(ctx, ft(ref), files.ListQuery{Path: "/"})
			return err
		},
		"ReadFile": func(ref string) error {
			_, err := h.plane.Files.ReadFile(ctx, ft(ref), node.ReadSpec{Path: "/etc/passwd"})
			return err
		},
		"WriteFile": func(ref string) error {
			_, _, err := h.plane.Files.WriteFile(ctx, ft(ref), files.WriteRequest{Path: "/x", Size: -1}, strings.NewReader("x"))
			return err
		},
		"EditFile": func(ref string) error {
			_, err := h.plane.Files.EditFile(ctx, ft(ref), "/x", nil, api.EditFileRequest{Edits: []api.FileEdit{{Old: "a", New: "b"}}})
			return err
		},
		"Mkdir": func(ref string) error {
			_, err := h.plane.Files.Mkdir(ctx, ft(ref), api.MkdirRequest{Path: "/d"}, "")
			return err
		},
		"MoveFile": func(ref string) error {
			_, err := h.plane.Files.MoveFile(ctx, ft(ref), api.MoveRequest{From: "/a", To: "/b"}, "")
			return err
		},
		"RemoveFile":  func(ref string) error { return h.plane.Files.RemoveFile(ctx, ft(ref), "/x", false) },
		"ReadArchive": func(ref string) error { _, err := h.plane.Files.ReadArchive(ctx, ft(ref), "/workspace"); return err },
		"WriteArchive": func(ref string) error {
			_, err := h.plane.Files.WriteArchive(ctx, ft(ref), files.ArchiveUpload{Path: "/workspace"}, strings.NewReader(""))
			return err
		},
	}
	for name, call := range calls {
		for _, ref := range []string{sb.ID, sb.Name} {
			t.Run(name+"/"+ref, func(t *testing.T) {
				wantCode(t, call(ref), api.CodeNotFound)
			})
		}
	}
	if got := h.node.Calls()[before:]; len(got) != 0 {
		t.Fatalf("another team's calls reached the node: %v", got)
	}
	// Team a's sandbox is untouched and its list holds only its own.
	got, err := h.srv.GetSandbox(ctx, h.a, sb.ID)
	if err != nil || got.State != api.StateRunning {
		t.Fatalf("owner sees %+v, %v", got, err)
	}
	l, err := h.srv.ListSandboxes(ctx, other, lifecycle.SandboxQuery{})
	if err != nil || len(l.Items) != 0 {
		t.Fatalf("team b lists %+v, %v", l.Items, err)
	}
	// A call that names no team is refused, never read as "every team".
	_, err = h.srv.ListSandboxes(ctx, "", lifecycle.SandboxQuery{})
	wantCode(t, err, api.CodeInternal)
	_, err = h.srv.GetSandbox(ctx, "", sb.ID)
	wantCode(t, err, api.CodeInternal)
}

func TestFilesThroughNode(t *testing.T) {
	h := newHarness(t)
	sb := h.running(t, h.a, "")
	t1 := files.Target{TeamID: h.a, Ref: sb.ID, Wake: true}
	e, created, err := h.plane.Files.WriteFile(t.Context(), t1, files.WriteRequest{Path: "/workspace/a/../f.txt", Size: -1}, strings.NewReader("hello"))
	if err != nil || !created || e.Path != "/workspace/f.txt" {
		t.Fatalf("write = %+v, %v, %v", e, created, err)
	}
	// A version that cannot exist fails the precondition before the node.
	_, _, err = h.plane.Files.WriteFile(t.Context(), t1, files.WriteRequest{Path: "/workspace/f.txt", IfMatch: []string{"not a version"}, Size: -1}, strings.NewReader("x"))
	wantCode(t, err, api.CodePreconditionFailed)
	c, err := h.plane.Files.ReadFile(t.Context(), t1, node.ReadSpec{Path: "/workspace/f.txt"})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(c.Body)
	c.Body.Close()
	if string(b) != "hello" {
		t.Fatalf("read %q", b)
	}
	// An asleep sandbox is woken by a file call, unless wake is false.
	if _, err := h.srv.SleepSandbox(t.Context(), h.a, sb.ID, ""); err != nil {
		t.Fatal(err)
	}
	h.wait(t, h.a, sb.ID, api.StateAsleep)
	_, err = h.plane.Files.StatFile(t.Context(), files.Target{TeamID: h.a, Ref: sb.ID}, "/workspace/f.txt")
	wantCode(t, err, api.CodeConflict)
	if e, err = h.plane.Files.StatFile(t.Context(), t1, "/workspace/f.txt"); err != nil || e.Size != 5 {
		t.Fatalf("stat after wake = %+v, %v", e, err)
	}
}

func ptr[T any](v T) *T { return &v }

// TestPolicyChangedWhileCreating: a PATCH of the network policy while the
// sandbox is still creating is the policy it runs under.
func TestPolicyChangedWhileCreating(t *testing.T) {
	h := newHarness(t)
	gate := make(chan struct{})
	h.node.StartGate = gate
	sb, err := h.srv.CreateSandbox(t.Context(), h.a, api.CreateSandboxRequest{
		Network: &api.NetworkPolicy{Allow: []string{"example.test"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.srv.UpdateSandbox(t.Context(), h.a, sb.ID, api.UpdateSandboxRequest{
		Network: &api.NetworkPolicy{Allow: []string{}},
	}); err != nil {
		t.Fatal(err)
	}
	close(gate)
	h.wait(t, h.a, sb.ID, api.StateRunning)
	got, _ := h.node.Sandbox(sb.ID)
	if len(got.Policy.Allow) != 0 {
		t.Fatalf("the sandbox runs under %v, want the policy of the PATCH (allow nothing)", got.Policy.Allow)
	}
}

// TestEventsExpire: events older than the retention are dropped, newer
// ones and cursors stay.
func TestEventsExpire(t *testing.T) {
	h := newHarness(t)
	ctx := t.Context()
	old, err := h.st.AppendEvent(ctx, h.a, api.Event{Type: "sandbox.idle", Time: time.Now().Add(-31 * 24 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	sb := h.running(t, h.a, "")
	h.srv.ExpireEvents(ctx)
	l, err := h.plane.Events.ListEvents(ctx, h.a, lifecycle.EventQuery{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range l.Items {
		if e.ID == old.ID {
			t.Fatalf("an event of 31 days ago outlived the 30-day retention")
		}
	}
	if got := h.events(t, h.a, sb.ID); !slices.Equal(got, []string{"sandbox.creating", "sandbox.running"}) {
		t.Fatalf("recent events = %v", got)
	}
	if _, err := h.plane.Events.ListEvents(ctx, h.a, lifecycle.EventQuery{Page: lifecycle.Page{Cursor: old.ID}}); err != nil {
		t.Fatalf("a cursor at an expired event: %v", err)
	}
}

// TestCreateRefusedWithoutRoom: a node without room refuses at create, and
// nothing is stored or started.
func TestCreateRefusedWithoutRoom(t *testing.T) {
	h := newHarness(t)
	h.node.Fail("admit", api.Errorf(api.CodeResourceExhausted, "this node cannot hold another 4096 MiB disk"))
	_, err := h.srv.CreateSandbox(t.Context(), h.a, api.CreateSandboxRequest{Name: "big"})
	wantCode(t, err, api.CodeResourceExhausted)
	l, err := h.srv.ListSandboxes(t.Context(), h.a, lifecycle.SandboxQuery{})
	if err != nil || len(l.Items) != 0 {
		t.Fatalf("after a refused create the team has %+v (%v)", l.Items, err)
	}
	for _, c := range h.node.Calls() {
		if strings.HasPrefix(c, "start ") {
			t.Fatalf("a refused sandbox was started: %v", h.node.Calls())
		}
	}
}
