package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/agent/wire"
)

// pidsCgroup makes a pids cgroup of its own for the test (v1 or v2) and
// removes it after, killing whatever is left in it; it skips where there
// is none.
func pidsCgroup(t *testing.T) string {
	t.Helper()
	root := "/sys/fs/cgroup/pids"
	if _, err := os.Stat(root); err != nil {
		ctl, err := os.ReadFile("/sys/fs/cgroup/cgroup.controllers")
		if err != nil || !strings.Contains(string(ctl), "pids") {
			t.Skip("no pids cgroup controller")
		}
		root = "/sys/fs/cgroup"
	}
	dir := filepath.Join(root, fmt.Sprintf("cove-agent-test-%d-%d", os.Getpid(), time.Now().UnixNano()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Skipf("make a pids cgroup: %v", err)
	}
	t.Cleanup(func() {
		for range 100 {
			procs, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
			for _, f := range strings.Fields(string(procs)) {
				if pid, err := strconv.Atoi(f); err == nil {
					syscall.Kill(pid, syscall.SIGKILL)
				}
			}
			if err := os.Remove(dir); err == nil {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Errorf("cgroup %s stays", dir)
	})
	return dir
}

func cgroupInt(t *testing.T, file string) int {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b))
	n, err := strconv.Atoi(f[len(f)-1])
	if err != nil {
		t.Fatalf("%s: %q", file, b)
	}
	return n
}

// TestSparesOutlastAForkBomb runs the agent on one P, as a one-CPU
// sandbox does, in a pids cgroup, and lets a fork bomb take every pid.
// The bomb's SIGCHLDs wake the agent's signal goroutine, and each time it
// blocks again the Go runtime hands its P to another thread: were there
// no idle one, the runtime would make one, fail at the limit, and exit
// (the sandbox's init, so the sandbox with it). Without spare threads about one
// round in five ended so; it runs five.
func TestSparesOutlastAForkBomb(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for a PID namespace and a cgroup")
	}
	for round := range 5 {
		t.Run(strconv.Itoa(round), bombRound)
	}
}

func bombRound(t *testing.T) {
	cg := pidsCgroup(t)
	a := startInit(t, "GOMAXPROCS=1")
	if err := os.WriteFile(filepath.Join(cg, "cgroup.procs"), []byte(strconv.Itoa(a.cmd.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	// Room for the bomb's shell and a few of its children, then none.
	limit := cgroupInt(t, filepath.Join(cg, "pids.current")) + 16
	if err := os.WriteFile(filepath.Join(cg, "pids.max"), []byte(strconv.Itoa(limit)), 0o644); err != nil {
		t.Fatal(err)
	}

	ctx := t.Context()
	env := []string{"PATH=/usr/bin:/bin"}
	if _, err := a.c.Exec(ctx, wire.ExecRequest{ID: "bomb", Argv: []string{"sh", "-c", "bomb() { bomb | bomb & }; bomb; sleep 600"}, Env: env}); err != nil {
		t.Fatal(err)
	}
	// The bomb holds the limit while the agent serves: pings and
	// commands, which start or are refused, never an exit.
	rejected := filepath.Join(cg, "pids.events")
	for i := 0; i < 100 || cgroupInt(t, rejected) == 0; i++ {
		if i == 3000 {
			t.Fatalf("the bomb never reached the limit of %d pids", limit)
		}
		select {
		case err := <-a.waited:
			a.waited <- err
			t.Fatalf("the agent exited under the bomb (%v):\n%s", err, a.logs.String())
		default:
		}
		if _, err := a.c.Ping(ctx); err != nil {
			t.Fatalf("ping under the bomb: %v", err)
		}
		a.c.Exec(ctx, wire.ExecRequest{ID: fmt.Sprintf("c%d", i), Argv: []string{"true"}, Env: env})
		time.Sleep(5 * time.Millisecond)
	}
	if _, err := a.c.Ping(ctx); err != nil {
		t.Fatalf("ping after the bomb: %v", err)
	}
}
