package e2e

import (
	"bytes"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
)

// TestRestartAfterKill9 kills `cove serve` with SIGKILL while a command
// runs, starts it again, and checks that the sandbox was reattached: the
// command's output, recorded while no server ran, arrives whole; the
// sandbox serves new commands; and a sandbox whose container died while the
// server was down is marked failed with a reason and cleaned up.
func TestRestartAfterKill9(t *testing.T) {
	s := e2etest.StartServer(t)
	ctx := t.Context()
	keep := e2etest.Create(t, s.Admin, api.CreateSandboxRequest{Name: "keep"})
	lose := e2etest.Create(t, s.Admin, api.CreateSandboxRequest{Name: "lose"})
	cmd, err := s.Admin.Exec(ctx, keep.ID, api.CreateCommandRequest{
		Command: "for i in $(seq 1 40); do echo line $i; sleep 0.05; done",
	})
	if err != nil {
		t.Fatal(err)
	}
	lost, err := s.Admin.Exec(ctx, lose.ID, api.CreateCommandRequest{Command: "sleep 1000"})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)

	s.Stop(syscall.SIGKILL)
	// While no server runs: the first sandbox's command goes on; the second
	// sandbox's container dies.
	if out, err := exec.Command("runc", "--root", filepath.Join(s.DataDir, "runc"), "kill", lose.ID, "KILL").CombinedOutput(); err != nil {
		t.Fatalf("kill container: %v %s", err, out)
	}
	time.Sleep(2500 * time.Millisecond) // the command ends while the server is down
	s.Start()

	got, err := s.Admin.GetSandbox(ctx, keep.ID)
	if err != nil || got.State != api.StateRunning {
		t.Fatalf("kept sandbox after restart: %s %v", got.State, err)
	}
	c, err := s.Admin.GetCommand(ctx, keep.ID, cmd.ID)
	deadline := time.Now().Add(10 * time.Second)
	for err == nil && c.State == api.CommandRunning && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		c, err = s.Admin.GetCommand(ctx, keep.ID, cmd.ID)
	}
	if err != nil || c.State != api.CommandExited || c.ExitCode == nil || *c.ExitCode != 0 {
		t.Fatalf("command after restart: %+v %v", c, err)
	}
	var out bytes.Buffer
	if err := s.Admin.Output(ctx, keep.ID, cmd.ID, 0, false, func(r api.OutputRecord) error {
		out.Write(r.Data)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var want strings.Builder
	for i := 1; i <= 40; i++ {
		fmt.Fprintf(&want, "line %d\n", i)
	}
	if out.String() != want.String() {
		t.Errorf("output across the restart:\n%s\nwant:\n%s", out.String(), want.String())
	}
	if got := e2etest.MustOK(t, s.Admin, "keep", "echo after"); got != "after\n" {
		t.Errorf("new command after restart: %q", got)
	}

	failed, err := s.Admin.GetSandbox(ctx, lose.ID)
	if err != nil || failed.State != api.StateFailed || !strings.Contains(failed.StateReason, "restart") {
		t.Errorf("sandbox whose container died: %s %q %v, want failed with a reason", failed.State, failed.StateReason, err)
	}
	lc, err := s.Admin.GetCommand(ctx, lose.ID, lost.ID)
	if err != nil || lc.State != api.CommandLost {
		t.Errorf("its command: %s %v, want lost", lc.State, err)
	}
	if left := settledLeftovers(t, s, lose.ID); len(left) > 0 {
		t.Errorf("the failed sandbox left:\n%s", strings.Join(left, "\n"))
	}
	// Its name is free again.
	e2etest.Create(t, s.Admin, api.CreateSandboxRequest{Name: "lose"})
}

// TestSigtermKeepsSandboxes: a graceful stop leaves sandboxes and their
// commands running, and the next start picks them up.
func TestSigtermKeepsSandboxes(t *testing.T) {
	s := e2etest.StartServer(t)
	sb := e2etest.Create(t, s.Admin, api.CreateSandboxRequest{})
	cmd, err := s.Admin.Exec(t.Context(), sb.ID, api.CreateCommandRequest{Command: "sleep 2; echo done"})
	if err != nil {
		t.Fatal(err)
	}
	s.Stop(syscall.SIGTERM)
	s.Start()
	res, err := s.Admin.ExecWait(t.Context(), sb.ID, api.CreateCommandRequest{Command: "echo back"})
	if err != nil || res.Stdout != "back\n" {
		t.Fatalf("after a graceful restart: %q %v", res.Stdout, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := s.Admin.GetCommand(t.Context(), sb.ID, cmd.ID)
		if err != nil {
			t.Fatal(err)
		}
		if c.State == api.CommandExited {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("command across a graceful restart: %s", c.State)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
