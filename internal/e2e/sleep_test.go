package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
	cove "github.com/cove-dev/cove/sdk/go"
)

// writeFiles fills a sandbox with 100 MiB of random bytes and a few small
// files and returns their digests as one string.
func writeFiles(t testing.TB, c *cove.Client, ref string) string {
	t.Helper()
	e2etest.MustOK(t, c, ref, "head -c 104857600 /dev/urandom > /workspace/random.bin && mkdir -p /workspace/d/e && echo hello > /workspace/d/e/f.txt && ln -s d/e/f.txt /workspace/link && chmod 0751 /workspace/d")
	return digests(t, c, ref)
}

func digests(t testing.TB, c *cove.Client, ref string) string {
	t.Helper()
	return e2etest.MustOK(t, c, ref, "cd /workspace && sha256sum random.bin d/e/f.txt && readlink link && stat -c '%a %U' d")
}

func TestSleepWakeKeepsFiles(t *testing.T) {
	s := e2etest.StartServer(t)
	ctx := t.Context()
	sb := e2etest.Create(t, s.Admin, api.CreateSandboxRequest{Name: "nap", Env: map[string]string{"KEEP": "me"}})
	before := writeFiles(t, s.Admin, sb.ID)
	running, err := s.Admin.Exec(ctx, sb.ID, api.CreateCommandRequest{Command: "echo before-sleep; sleep 1000"})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if _, err := s.Admin.SleepSandbox(ctx, "nap"); err != nil {
		t.Fatal(err)
	}
	got, err := s.Admin.WaitSandbox(ctx, sb.ID, api.StateAsleep, 2*time.Minute)
	if err != nil || got.State != api.StateAsleep {
		t.Fatalf("sleep: %s %q %v", got.State, got.StateReason, err)
	}
	// Asleep: nothing of it runs or is mounted on the node.
	// Recorded output stays.
	if left := settledLeftovers(t, s, sb.ID, filepath.Join(s.DataDir, "output", sb.ID)); len(left) > 0 {
		t.Errorf("asleep, yet on the node:\n%s", strings.Join(left, "\n"))
	}
	c, err := s.Admin.GetCommand(ctx, sb.ID, running.ID)
	if err != nil || c.State != api.CommandLost {
		t.Errorf("command running at sleep: %s %v, want lost", c.State, err)
	}
	if out := outputOf(t, s.Admin, sb.ID, running.ID); out != "before-sleep\n" {
		t.Errorf("its recorded output after sleep: %q", out)
	}
	if _, err := s.Admin.Exec(ctx, sb.ID, api.CreateCommandRequest{Command: "true"}, cove.ExecNoWake()); api.ErrorCode(err) != api.CodeConflict {
		t.Errorf("exec with wake=false while asleep: %v, want conflict", err)
	}

	if _, err := s.Admin.WakeSandbox(ctx, "nap"); err != nil {
		t.Fatal(err)
	}
	got, err = s.Admin.WaitSandbox(ctx, sb.ID, api.StateRunning, 2*time.Minute)
	if err != nil || got.State != api.StateRunning || got.ID != sb.ID || got.Name != "nap" {
		t.Fatalf("wake: %+v %v", got, err)
	}
	if after := digests(t, s.Admin, sb.ID); after != before {
		t.Errorf("files after wake:\n%s\nbefore:\n%s", after, before)
	}
	if out := e2etest.MustOK(t, s.Admin, sb.ID, "ps -o comm | grep -c '^sleep' || true; echo $KEEP; hostname"); out != "0\nme\nnap\n" {
		t.Errorf("after wake: %q (want no old process, env kept, same hostname)", out)
	}
	if _, err := os.Stat(filepath.Join(s.DataDir, "saves", sb.ID)); !os.IsNotExist(err) {
		t.Errorf("the save outlived the wake: %v", err)
	}
	var types []string
	for _, e := range events(t, s, "sandbox="+sb.ID) {
		types = append(types, e.Type)
	}
	if !subsequence(types, "sandbox.sleeping", "sandbox.asleep", "sandbox.waking", "sandbox.running") {
		t.Errorf("events: %s", types)
	}
	// Terminate from asleep removes the save too.
	e2etest.MustOK(t, s.Admin, sb.ID, "true")
	s.Admin.SleepSandbox(ctx, sb.ID)
	s.Admin.WaitSandbox(ctx, sb.ID, api.StateAsleep, time.Minute)
	if _, err := s.Admin.TerminateSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	s.Admin.WaitSandbox(ctx, sb.ID, api.StateTerminated, time.Minute)
	if left := settledLeftovers(t, s, sb.ID); len(left) > 0 {
		t.Errorf("terminated from asleep, left:\n%s", strings.Join(left, "\n"))
	}
	if _, err := os.Stat(filepath.Join(s.DataDir, "saves", sb.ID)); !os.IsNotExist(err) {
		t.Errorf("the save outlived terminate: %v", err)
	}
}

func TestIdleAndLifetime(t *testing.T) {
	s := e2etest.StartServer(t)
	ctx := t.Context()

	t.Run("idle sleeps only after the last command", func(t *testing.T) {
		idle := int64(3)
		sb := e2etest.Create(t, s.Admin, api.CreateSandboxRequest{IdleTimeoutS: &idle})
		cmd, err := s.Admin.Exec(ctx, sb.ID, api.CreateCommandRequest{Command: "sleep 8"})
		if err != nil {
			t.Fatal(err)
		}
		// Watch without touching the sandbox: the events say what happened.
		deadline := time.Now().Add(40 * time.Second)
		var asleepAt time.Time
		for time.Now().Before(deadline) && asleepAt.IsZero() {
			for _, e := range events(t, s, "sandbox="+sb.ID+"&type=sandbox.asleep") {
				asleepAt = e.Time
			}
			time.Sleep(200 * time.Millisecond)
		}
		c, _ := s.Admin.GetCommand(ctx, sb.ID, cmd.ID)
		if asleepAt.IsZero() || c.State != api.CommandExited || c.EndedAt == nil || asleepAt.Before(*c.EndedAt) {
			t.Fatalf("asleep at %v, command %s ended %v: the sandbox must sleep only after the command ends", asleepAt, c.State, c.EndedAt)
		}
		var types []string
		for _, e := range events(t, s, "sandbox="+sb.ID) {
			types = append(types, e.Type)
		}
		if !subsequence(types, "sandbox.idle", "sandbox.sleeping", "sandbox.asleep") {
			t.Errorf("events: %s", types)
		}
		got, _ := s.Admin.GetSandbox(ctx, sb.ID)
		if got.LastActiveAt == nil || got.LastActiveAt.Before(*c.EndedAt) {
			t.Errorf("last_active_at %v is before the command ended (%v)", got.LastActiveAt, c.EndedAt)
		}
	})

	t.Run("idle may terminate", func(t *testing.T) {
		idle := int64(1)
		sb := e2etest.Create(t, s.Admin, api.CreateSandboxRequest{IdleTimeoutS: &idle, OnIdle: "terminate"})
		got, err := s.Admin.WaitSandbox(ctx, sb.ID, api.StateTerminated, 30*time.Second)
		if err != nil || got.State != api.StateTerminated {
			t.Errorf("idle terminate: %s %v", got.State, err)
		}
	})

	t.Run("max lifetime terminates", func(t *testing.T) {
		life := int64(2)
		start := time.Now()
		sb := e2etest.Create(t, s.Admin, api.CreateSandboxRequest{MaxLifetimeS: &life})
		if sb.ExpiresAt == nil || sb.ExpiresAt.Sub(sb.CreatedAt) != 2*time.Second {
			t.Errorf("expires_at = %v, created %v", sb.ExpiresAt, sb.CreatedAt)
		}
		got, err := s.Admin.WaitSandbox(ctx, sb.ID, api.StateTerminated, 30*time.Second)
		if err != nil || got.State != api.StateTerminated {
			t.Fatalf("lifetime: %s %v", got.State, err)
		}
		if d := time.Since(start); d < 2*time.Second || d > 10*time.Second {
			t.Errorf("terminated after %v, want about 2s", d)
		}
		if len(events(t, s, "sandbox="+sb.ID+"&type=sandbox.expired")) != 1 {
			t.Error("no sandbox.expired event")
		}
	})
}

// TestKill9DuringSleepAndWake kills the server in the middle of a sleep
// and of a wake; after a restart the sandbox is asleep with a complete save
// or running with its files, and a wake that was answered before the kill
// ends running.
func TestKill9DuringSleepAndWake(t *testing.T) {
	s := e2etest.StartServer(t)
	ctx := t.Context()
	sb := e2etest.Create(t, s.Admin, api.CreateSandboxRequest{})
	before := writeFiles(t, s.Admin, sb.ID)

	settle := func(what string) api.Sandbox {
		t.Helper()
		deadline := time.Now().Add(2 * time.Minute)
		for {
			got, err := s.Admin.GetSandbox(ctx, sb.ID)
			if err != nil {
				t.Fatal(err)
			}
			switch got.State {
			case api.StateAsleep, api.StateRunning:
				return got
			case api.StateFailed, api.StateTerminated:
				t.Fatalf("%s: %s %q", what, got.State, got.StateReason)
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: stuck in %s", what, got.State)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	wakeAndCheck := func(what string) {
		t.Helper()
		if got := settle(what); got.State == api.StateAsleep {
			if _, err := s.Admin.WakeSandbox(ctx, sb.ID); err != nil {
				t.Fatal(err)
			}
			if got, err := s.Admin.WaitSandbox(ctx, sb.ID, api.StateRunning, 2*time.Minute); err != nil || got.State != api.StateRunning {
				t.Fatalf("%s: wake: %s %q %v", what, got.State, got.StateReason, err)
			}
		}
		if after := digests(t, s.Admin, sb.ID); after != before {
			t.Errorf("%s: files differ:\n%s\nwant:\n%s", what, after, before)
		}
	}

	for _, delay := range []time.Duration{0, 300 * time.Millisecond} {
		if _, err := s.Admin.SleepSandbox(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
		time.Sleep(delay)
		s.Stop(syscall.SIGKILL)
		s.Start()
		wakeAndCheck("kill -9 during sleep")

		// And in the middle of a wake.
		s.Admin.SleepSandbox(ctx, sb.ID)
		if got, err := s.Admin.WaitSandbox(ctx, sb.ID, api.StateAsleep, 2*time.Minute); err != nil || got.State != api.StateAsleep {
			t.Fatalf("sleep: %s %v", got.State, err)
		}
		if _, err := s.Admin.WakeSandbox(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
		time.Sleep(delay)
		s.Stop(syscall.SIGKILL)
		s.Start()
		// The wake was answered: the restart finishes it.
		if got := settle("kill -9 during wake"); got.State != api.StateRunning {
			t.Fatalf("kill -9 during wake: %s %q; want running", got.State, got.StateReason)
		}
		wakeAndCheck("kill -9 during wake")
	}
}

// subsequence reports whether want appear in got in this order.
func subsequence(got []string, want ...string) bool {
	for _, g := range got {
		if len(want) > 0 && g == want[0] {
			want = want[1:]
		}
	}
	return len(want) == 0
}
