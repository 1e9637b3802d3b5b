// Package wakeexec tests, against a real `cove serve`, that a command sent
// to a sandbox that is asleep wakes it as a file call does, and one sent
// while it is going to sleep waits for the sleep to end and then wakes it;
// that wake=false refuses and leaves it asleep; that another team cannot
// wake someone else's sandbox this way; and the CLI's `cove sleep X; cove
// exec X -- …` and `cove exec --no-wake`.
package wakeexec

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
	cove "github.com/cove-dev/cove/sdk/go"
)

func TestMain(m *testing.M) { e2etest.Main(m) }

// asleep puts a sandbox to sleep and waits until it is asleep.
func asleep(t *testing.T, c *cove.Client, ref string) {
	t.Helper()
	if _, err := c.SleepSandbox(t.Context(), ref); err != nil {
		t.Fatal(err)
	}
	sb, err := c.WaitSandbox(t.Context(), ref, api.StateAsleep, 2*time.Minute)
	if err != nil || sb.State != api.StateAsleep {
		t.Fatalf("sleep: %s %q %v", sb.State, sb.StateReason, err)
	}
}

// state is the sandbox's state now.
func state(t *testing.T, c *cove.Client, ref string) api.SandboxState {
	t.Helper()
	sb, err := c.GetSandbox(t.Context(), ref)
	if err != nil {
		t.Fatal(err)
	}
	return sb.State
}

// events lists the types of a sandbox's events, oldest first.
func events(t *testing.T, c *cove.Client, id string) []string {
	t.Helper()
	l, err := c.Events(t.Context(), cove.EventQuery{Sandbox: id, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range l.Items {
		out = append(out, e.Type)
	}
	return out
}

// count is how many of events are typ.
func count(events []string, typ string) int {
	n := 0
	for _, e := range events {
		if e == typ {
			n++
		}
	}
	return n
}

// inOrder says whether want occur in events in that order (others may
// come between).
func inOrder(events []string, want ...string) bool {
	i := 0
	for _, e := range events {
		if i < len(want) && e == want[i] {
			i++
		}
	}
	return i == len(want)
}

// TestCommandWakesAsleep: with wake=false a command is refused (409) and
// the sandbox stays asleep, no wake begun; without it the command wakes
// the sandbox through the wake (its events) and sees the file written
// before the sleep.
func TestCommandWakesAsleep(t *testing.T) {
	s := e2etest.StartServer(t)
	ctx := t.Context()
	sb := e2etest.Create(t, s.Admin, api.CreateSandboxRequest{Name: "nap"})
	e2etest.MustOK(t, s.Admin, sb.ID, "echo kept > /workspace/kept.txt")
	asleep(t, s.Admin, sb.ID)

	for _, wait := range []bool{false, true} {
		var err error
		if wait {
			_, err = s.Admin.ExecWait(ctx, "nap", api.CreateCommandRequest{Command: "true"}, cove.ExecNoWake())
		} else {
			_, err = s.Admin.Exec(ctx, "nap", api.CreateCommandRequest{Command: "true"}, cove.ExecNoWake())
		}
		if api.ErrorCode(err) != api.CodeConflict || !strings.Contains(err.Error(), "wake=false") {
			t.Fatalf("exec (wait %v) with wake=false while asleep: %v, want a conflict naming wake=false", wait, err)
		}
	}
	if st := state(t, s.Admin, sb.ID); st != api.StateAsleep {
		t.Fatalf("after refused commands the sandbox is %s, want asleep", st)
	}
	if ev := events(t, s.Admin, sb.ID); count(ev, "sandbox.waking") != 0 {
		t.Fatalf("a refused command began a wake: %v", ev)
	}
	cmds, err := s.Admin.ListCommands(ctx, sb.ID, 100, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(cmds.Items) != 1 { // the write before the sleep
		t.Fatalf("commands after the refusals: %+v, want only the one before the sleep", cmds.Items)
	}

	res, err := s.Admin.ExecWait(ctx, "nap", api.CreateCommandRequest{Command: "cat /workspace/kept.txt"})
	if err != nil {
		t.Fatalf("exec in an asleep sandbox: %v", err)
	}
	if e2etest.ExitCode(res) != 0 || res.Stdout != "kept\n" {
		t.Fatalf("the command after the wake: exit %d, stdout %q, stderr %q", e2etest.ExitCode(res), res.Stdout, res.Stderr)
	}
	if st := state(t, s.Admin, sb.ID); st != api.StateRunning {
		t.Fatalf("after the command the sandbox is %s, want running", st)
	}
	ev := events(t, s.Admin, sb.ID)
	for _, want := range [][]string{{"sandbox.asleep", "sandbox.waking", "command.started"}, {"sandbox.waking", "sandbox.running"}} {
		if !inOrder(ev, want...) {
			t.Errorf("events %v; want %v in that order", ev, want)
		}
	}
	if n := count(ev, "sandbox.waking"); n != 1 {
		t.Errorf("%d wakes in %v; want one", n, ev)
	}
}

// TestCommandDuringSleep: a command sent right after a sleep was asked
// for, while the sandbox is still saving, succeeds: the sleep completes,
// then the sandbox wakes with its files and the command runs.
func TestCommandDuringSleep(t *testing.T) {
	s := e2etest.StartServer(t)
	ctx := t.Context()
	sb := e2etest.Create(t, s.Admin, api.CreateSandboxRequest{})
	// Enough to save that the sleep is rarely done when the command comes;
	// the assertions hold either way.
	e2etest.MustOK(t, s.Admin, sb.ID, "head -c 33554432 /dev/urandom > /workspace/big && sha256sum /workspace/big > /workspace/big.sum")
	slept, err := s.Admin.SleepSandbox(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if slept.State != api.StateSleeping && slept.State != api.StateAsleep {
		t.Fatalf("the sleep answered %s", slept.State)
	}
	res, err := s.Admin.ExecWait(ctx, sb.ID, api.CreateCommandRequest{Command: "sha256sum -c /workspace/big.sum"})
	if err != nil {
		t.Fatalf("exec sent during a sleep: %v", err)
	}
	if e2etest.ExitCode(res) != 0 || !strings.Contains(res.Stdout, "OK") {
		t.Fatalf("the command after the sleep: exit %d, stdout %q, stderr %q", e2etest.ExitCode(res), res.Stdout, res.Stderr)
	}
	if st := state(t, s.Admin, sb.ID); st != api.StateRunning {
		t.Fatalf("after the command the sandbox is %s, want running", st)
	}
	ev := events(t, s.Admin, sb.ID)
	for _, want := range [][]string{
		{"sandbox.sleeping", "sandbox.asleep", "sandbox.waking", "command.started"},
		{"sandbox.waking", "sandbox.running"},
	} {
		if !inOrder(ev, want...) {
			t.Errorf("events %v; want %v in that order", ev, want)
		}
	}
}

// TestOtherTeamCannotWake: another team's command, by ID or by name, is
// not found, wakes nothing and runs nothing; with wake=false too.
func TestOtherTeamCannotWake(t *testing.T) {
	s := e2etest.StartServer(t)
	ctx := t.Context()
	other := s.NewTeam("other")
	sb := e2etest.Create(t, s.Admin, api.CreateSandboxRequest{Name: "mine"})
	asleep(t, s.Admin, sb.ID)
	for _, ref := range []string{sb.ID, "mine"} {
		if _, err := other.Exec(ctx, ref, api.CreateCommandRequest{Command: "true"}); api.ErrorCode(err) != api.CodeNotFound {
			t.Errorf("another team's exec in %s: %v, want not_found", ref, err)
		}
		if _, err := other.ExecWait(ctx, ref, api.CreateCommandRequest{Command: "true"}, cove.ExecNoWake()); api.ErrorCode(err) != api.CodeNotFound {
			t.Errorf("another team's exec with wake=false in %s: %v, want not_found", ref, err)
		}
	}
	if st := state(t, s.Admin, sb.ID); st != api.StateAsleep {
		t.Fatalf("after another team's commands the sandbox is %s, want asleep", st)
	}
	if ev := events(t, s.Admin, sb.ID); count(ev, "sandbox.waking") != 0 || count(ev, "command.started") != 0 {
		t.Fatalf("another team's commands woke or ran something: %v", ev)
	}
}

// cli runs the real cove binary with the admin's config (HOME) and
// returns stdout, stderr and the exit code.
func cli(t *testing.T, s *e2etest.Server, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(e2etest.BinDir(), "cove"), args...)
	cmd.Env = append(os.Environ(), "HOME="+s.Home, "COVE_URL=", "COVE_API_KEY=")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

// TestCLI: `cove sleep X` then `cove exec X -- echo hi` prints hi (the
// sleep answers while the sandbox is still sleeping: the command waits
// for it, then wakes it); `cove exec --no-wake` of an asleep sandbox
// exits 125 with one line saying why and leaves it asleep.
func TestCLI(t *testing.T) {
	s := e2etest.StartServer(t)
	e2etest.Create(t, s.Admin, api.CreateSandboxRequest{Name: "demo"})
	if out, errs, code := cli(t, s, "sleep", "demo"); code != 0 {
		t.Fatalf("cove sleep: exit %d, %q %q", code, out, errs)
	}
	out, errs, code := cli(t, s, "exec", "demo", "--", "echo", "hi")
	if code != 0 || out != "hi\n" {
		t.Fatalf("cove exec after cove sleep: exit %d, stdout %q, stderr %q; want hi", code, out, errs)
	}
	if st := state(t, s.Admin, "demo"); st != api.StateRunning {
		t.Fatalf("after cove exec the sandbox is %s, want running", st)
	}

	if out, errs, code := cli(t, s, "sleep", "--wait", "demo"); code != 0 {
		t.Fatalf("cove sleep --wait: exit %d, %q %q", code, out, errs)
	}
	out, errs, code = cli(t, s, "exec", "--no-wake", "demo", "--", "echo", "hi")
	if code != 125 || out != "" {
		t.Errorf("cove exec --no-wake of an asleep sandbox: exit %d, stdout %q; want 125 and nothing", code, out)
	}
	if lines := strings.Split(strings.TrimRight(errs, "\n"), "\n"); len(lines) != 1 || !strings.Contains(errs, "asleep") {
		t.Errorf("cove exec --no-wake said %q; want one line saying the sandbox is asleep", errs)
	}
	if st := state(t, s.Admin, "demo"); st != api.StateAsleep {
		t.Fatalf("after cove exec --no-wake the sandbox is %s, want asleep", st)
	}
}
