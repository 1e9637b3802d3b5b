package hostguard

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
	"github.com/cove-dev/cove/internal/node/image"
	cove "github.com/cove-dev/cove/sdk/go"
)

// TestStateReasonHidesHostDetails: when the node fails to start, sleep,
// wake, terminate or reattach a sandbox, its state_reason says so without
// host paths or the runtime's log; the server log keeps the detail.
func TestStateReasonHidesHostDetails(t *testing.T) {
	e2etest.RequireRoot(t)
	images, err := os.MkdirTemp("/var/tmp", "cove-hostguard-images-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(images) })
	os.Chmod(images, 0o711)
	imgs := map[string]image.Image{}
	for _, name := range []string{"busybox", "flaky", "noagent"} {
		img, err := image.BuildBusybox(t.Context(), images, name)
		if err != nil {
			t.Fatal(err)
		}
		imgs[name] = img
	}
	// noagent: the agent's mount point is a file where a directory must
	// be, so runc fails, and its log names host paths.
	agentDir := filepath.Join(imgs["noagent"].Rootfs, filepath.Dir(image.AgentMountPoint))
	if err := os.RemoveAll(agentDir); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(agentDir, nil, 0o644); err != nil {
		t.Fatal(err)
	}

	s := e2etest.StartServer(t, e2etest.WithArgs("--images-dir", images, "--warm-pool", "0"))
	ctx := t.Context()
	checkReason := func(t *testing.T, sb api.Sandbox, state api.SandboxState) {
		t.Helper()
		if sb.State != state {
			t.Fatalf("sandbox %s is %s (%q), want %s", sb.ID, sb.State, sb.StateReason, state)
		}
		if sb.StateReason == "" {
			t.Errorf("sandbox %s is %s without a reason", sb.ID, sb.State)
		}
		for _, leak := range []string{"/var/", "/tmp", s.DataDir, images, "agent log", "runc", ".sock", "exit status"} {
			if strings.Contains(sb.StateReason, leak) {
				t.Errorf("state_reason %q shows %q", sb.StateReason, leak)
			}
		}
	}
	create := func(t *testing.T, template string) api.Sandbox {
		t.Helper()
		sb, err := s.Admin.CreateSandbox(ctx, api.CreateSandboxRequest{Template: template}, true)
		if err != nil {
			t.Fatalf("create: %v", err)
		}
		return settle(t, s.Admin, sb.ID, api.StateCreating)
	}
	terminate := func(t *testing.T, id string) api.Sandbox {
		t.Helper()
		if _, err := s.Admin.TerminateSandbox(ctx, id); err != nil {
			t.Fatal(err)
		}
		return settle(t, s.Admin, id, api.StateTerminating)
	}

	t.Run("start", func(t *testing.T) {
		sb := create(t, "noagent")
		checkReason(t, sb, api.StateFailed)
		if !strings.Contains(s.Tail(1<<20), sb.ID) {
			t.Errorf("the server log says nothing of %s", sb.ID)
		}
	})

	t.Run("wake", func(t *testing.T) {
		sb := create(t, "flaky")
		sleep(t, s.Admin, sb.ID)
		// The image's tree gone (sandboxes reach it through the
		// mounter's rights, so closing it to them no longer fails a
		// start): the runtime refuses to start, naming the path.
		rootfs := imgs["flaky"].Rootfs
		if err := os.Rename(rootfs, rootfs+".away"); err != nil {
			t.Fatal(err)
		}
		defer os.Rename(rootfs+".away", rootfs)
		if _, err := s.Admin.WakeSandbox(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
		checkReason(t, settle(t, s.Admin, sb.ID, api.StateWaking), api.StateAsleep)
	})

	t.Run("sleep", func(t *testing.T) {
		sb := create(t, "busybox")
		// The saves directory read-only: the archive cannot be written.
		saves := filepath.Join(s.DataDir, "saves")
		mountOver(t, saves, "ro")
		if _, err := s.Admin.SleepSandbox(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
		checkReason(t, settle(t, s.Admin, sb.ID, api.StateSleeping), api.StateFailed)
		unmount(t, saves)
		checkReason(t, terminate(t, sb.ID), api.StateTerminated)
	})

	t.Run("terminate", func(t *testing.T) {
		sb := create(t, "busybox")
		// A mount left in the state dir: the runtime keeps the dir and
		// says which mount is in the way.
		extra := filepath.Join(s.DataDir, "sandboxes", sb.ID, "extra")
		if err := os.Mkdir(extra, 0o700); err != nil {
			t.Fatal(err)
		}
		mountOver(t, extra, "rw")
		checkReason(t, terminate(t, sb.ID), api.StateFailed)
		unmount(t, extra)
		if got := terminate(t, sb.ID); got.State != api.StateTerminated {
			t.Errorf("terminate again: %s (%s)", got.State, got.StateReason)
		}
	})

	t.Run("recover", func(t *testing.T) {
		sb := create(t, "busybox")
		s.Stop(syscall.SIGTERM)
		// The agent's socket gone: the restarted server cannot reattach.
		if err := os.Remove(filepath.Join(s.DataDir, "sandboxes", sb.ID, "agent.sock")); err != nil {
			t.Fatal(err)
		}
		s.Start()
		got, err := s.Admin.GetSandbox(ctx, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		checkReason(t, settle(t, s.Admin, got.ID, api.StateRunning), api.StateFailed)
	})
}

// settle waits until the sandbox leaves the given states and returns it.
func settle(t *testing.T, c *cove.Client, id string, from ...api.SandboxState) api.Sandbox {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	for {
		sb, err := c.GetSandbox(ctx, id)
		if err != nil {
			t.Fatalf("sandbox %s: %v", id, err)
		}
		moving := false
		for _, st := range from {
			moving = moving || sb.State == st
		}
		if !moving {
			return sb
		}
		select {
		case <-ctx.Done():
			t.Fatalf("sandbox %s stayed %s", id, sb.State)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func sleep(t *testing.T, c *cove.Client, id string) {
	t.Helper()
	if _, err := c.SleepSandbox(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	if sb := settle(t, c, id, api.StateRunning, api.StateSleeping); sb.State != api.StateAsleep {
		t.Fatalf("sleep: %s (%s)", sb.State, sb.StateReason)
	}
}

// mountOver mounts a small tmpfs on dir (mode "ro" or "rw") until the test
// ends or unmount.
func mountOver(t *testing.T, dir, mode string) {
	t.Helper()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", mode+",size=1m", "hostguard", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount tmpfs on %s: %v %s", dir, err, out)
	}
	t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })
}

func unmount(t *testing.T, dir string) {
	t.Helper()
	if err := syscall.Unmount(dir, 0); err != nil {
		t.Fatalf("unmount %s: %v", dir, err)
	}
}
