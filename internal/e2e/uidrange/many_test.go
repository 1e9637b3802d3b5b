package uidrange

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
	"github.com/cove-dev/cove/internal/mountinfo"
	"github.com/cove-dev/cove/internal/node/image"
)

// manySandboxes is more than the kernel lets one uid hold keys (200: runc
// gives every sandbox a session keyring) and more than one user may have
// inotify instances by default (128).
const manySandboxes = 250

// TestManySandboxes: 250 small sandboxes run at once, each with the
// session keyring runc makes for it, each holding an inotify instance
// with a watch. With one uid for all, the 201st start failed ("unable to
// join session keyring: disk quota exceeded") and the 129th inotify
// instance with EMFILE. Every sandbox has a range of its own; all of it
// is gone after they are terminated.
func TestManySandboxes(t *testing.T) {
	e2etest.RequireRoot(t)
	images, err := os.MkdirTemp("/var/tmp", "cove-uidrange-images-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(images) })
	os.Chmod(images, 0o711)
	img, err := image.BuildBusybox(t.Context(), images, "busybox")
	if err != nil {
		t.Fatal(err)
	}
	build := exec.Command("go", "build", "-o", filepath.Join(img.Rootfs, "bin", "inotifyhold"), "./testdata/inotifyhold")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build inotifyhold: %v: %s", err, out)
	}
	// A /21 holds 512 sandboxes' links; 10.(200+octet)/16 is this process's.
	s := e2etest.StartServer(t, e2etest.WithArgs("--images-dir", images, "--warm-pool", "0",
		"--subnet", fmt.Sprintf("10.%d.0.0/21", 200+e2etest.RunOctet())))

	mem, disk := int64(128), int64(64)
	req := api.CreateSandboxRequest{Resources: &api.ResourcesRequest{MemoryMiB: &mem, DiskMiB: &disk}}
	// The background holder keeps its instance; the loop waits for its
	// word (bounded by the command's timeout, not by a clock here).
	const hold = `(inotifyhold > /tmp/inotify 2>&1 &); while [ ! -s /tmp/inotify ]; do sleep 0.05; done; cat /tmp/inotify; cat /proc/self/uid_map`
	ids := make([]string, manySandboxes)
	hosts := make([]string, manySandboxes)
	start := time.Now()
	each(manySandboxes, func(i int) error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		sb, err := s.Admin.CreateSandbox(ctx, req, true)
		if err != nil {
			return fmt.Errorf("create sandbox %d: %w", i, err)
		}
		ids[i] = sb.ID
		if sb.State != api.StateRunning {
			return fmt.Errorf("sandbox %d (%s) is %s: %s", i, sb.ID, sb.State, sb.StateReason)
		}
		timeout := int64(120)
		res, err := s.Admin.ExecWait(ctx, sb.ID, api.CreateCommandRequest{Command: hold, TimeoutS: &timeout})
		if err != nil {
			return fmt.Errorf("sandbox %d: %w", i, err)
		}
		out := strings.Fields(res.Stdout)
		if e2etest.ExitCode(res) != 0 || len(out) != 4 || out[0] != "ok" {
			return fmt.Errorf("sandbox %d (%s): inotify: %q %q", i, sb.ID, res.Stdout, res.Stderr)
		}
		hosts[i] = out[2]
		return nil
	}, t)
	t.Logf("%d sandboxes started, each holding an inotify instance, in %v", manySandboxes, time.Since(start).Round(time.Second))
	if t.Failed() {
		t.Logf("max_user_instances %s", readSysctl("fs/inotify/max_user_instances"))
	}
	seen := map[string]int{}
	for i, h := range hosts {
		if h == "" {
			continue
		}
		if j, ok := seen[h]; ok {
			t.Errorf("sandboxes %d and %d both map root to host uid %s", j, i, h)
		}
		seen[h] = i
	}
	// All hold their instance at once.
	if n := countProcs("inotifyhold", s.Cgroup); n != manySandboxes && !t.Failed() {
		t.Errorf("%d inotifyhold processes run, want %d", n, manySandboxes)
	}

	start = time.Now()
	each(manySandboxes, func(i int) error {
		if ids[i] == "" {
			return nil
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		if _, err := s.Admin.TerminateSandbox(ctx, ids[i]); err != nil {
			return err
		}
		sb, err := s.Admin.WaitSandbox(ctx, ids[i], api.StateTerminated, 4*time.Minute)
		if err != nil {
			return err
		}
		if sb.State != api.StateTerminated {
			return fmt.Errorf("sandbox %s is %s: %s", sb.ID, sb.State, sb.StateReason)
		}
		return nil
	}, t)
	t.Logf("terminated in %v", time.Since(start).Round(time.Second))
	// Nothing is left: state dirs, mounts, loop devices, processes.
	if left, _ := os.ReadDir(filepath.Join(s.DataDir, "sandboxes")); len(left) > 0 {
		t.Errorf("%d state dirs left, e.g. %s", len(left), left[0].Name())
	}
	if m, err := mountinfo.Under(s.DataDir); err != nil || len(m) > 0 {
		t.Errorf("mounts left under the data dir: %v %v", m, err)
	}
	if n := loopsUnder(s.DataDir); n > 0 {
		t.Errorf("%d loop devices still backed by files of the data dir", n)
	}
	if n := countProcs("inotifyhold", s.Cgroup); n > 0 {
		t.Errorf("%d inotifyhold processes left", n)
	}
}

// each runs fn(0..n-1) on a few workers and reports every error.
func each(n int, fn func(i int) error, t *testing.T) {
	t.Helper()
	next := make(chan int)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := range next {
				if err := fn(i); err != nil {
					t.Error(err)
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
}

// countProcs counts the processes named comm in cgroups under parent.
func countProcs(comm, parent string) int {
	n := 0
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		c, err := os.ReadFile(filepath.Join(d, "comm"))
		if err != nil || strings.TrimSpace(string(c)) != comm {
			continue
		}
		if cg, err := os.ReadFile(filepath.Join(d, "cgroup")); err == nil && strings.Contains(string(cg), parent+"/") {
			n++
		}
	}
	return n
}

// loopsUnder counts loop devices whose backing file is under dir.
func loopsUnder(dir string) int {
	n := 0
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, f := range files {
		if b, err := os.ReadFile(f); err == nil && strings.HasPrefix(string(b), dir+"/") {
			n++
		}
	}
	return n
}

func readSysctl(name string) string {
	b, err := os.ReadFile("/proc/sys/" + name)
	if err != nil {
		return err.Error()
	}
	return strconv.Quote(strings.TrimSpace(string(b)))
}
