package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
)

// TestLoad runs 50 sandboxes with 20 concurrent workers each, every worker
// running commands and writing and reading files for a bounded time. It
// requires zero errors, reports latency percentiles, and after terminating
// everything finds no leaked process, mount, cgroup, fence entry or server
// descriptor. It counts only what its own server made (its data dir,
// cgroup parent, nftables table and child processes), so it can run beside
// other tests. It runs with COVE_LOAD=1 (make load); COVE_LOAD_SECONDS
// sets its length.
func TestLoad(t *testing.T) {
	if os.Getenv("COVE_LOAD") == "" {
		t.Skip("set COVE_LOAD=1 (make load) to run the load test")
	}
	const sandboxes, workers = 50, 20
	duration := 20 * time.Second
	if v := os.Getenv("COVE_LOAD_SECONDS"); v != "" {
		var n int
		fmt.Sscan(v, &n)
		duration = time.Duration(n) * time.Second
	}
	s := e2etest.StartServer(t, e2etest.WithArgs("--warm-pool", "0"))
	ctx := t.Context()
	mountsBefore := ownMounts(s)
	fdsBefore := countFDs(s.PID())
	childrenBefore := descendants(s.PID())

	ids := make([]string, sandboxes)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	var mu sync.Mutex
	var errs []string
	fail := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		if len(errs) < 50 {
			errs = append(errs, fmt.Sprintf(format, args...))
		}
	}
	mem := int64(128)
	for i := range ids {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			sb, err := s.Admin.CreateSandbox(ctx, api.CreateSandboxRequest{Resources: &api.ResourcesRequest{MemoryMiB: &mem}}, true)
			if err != nil || sb.State != api.StateRunning {
				fail("create %d: %v %s", i, err, sb.StateReason)
				return
			}
			ids[i] = sb.ID
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("creating %d sandboxes:\n%s", sandboxes, strings.Join(errs, "\n"))
	}

	var lat struct {
		sync.Mutex
		exec, write, read []time.Duration
	}
	record := func(d *[]time.Duration, v time.Duration) {
		lat.Lock()
		*d = append(*d, v)
		lat.Unlock()
	}
	deadline := time.Now().Add(duration)
	for i, id := range ids {
		for w := range workers {
			wg.Go(func() {
				for n := 0; time.Now().Before(deadline); n++ {
					tag := fmt.Sprintf("%d-%d-%d", i, w, n)
					start := time.Now()
					res, err := s.Admin.ExecWait(ctx, id, api.CreateCommandRequest{Argv: []string{"echo", tag}})
					if err != nil || res.Stdout != tag+"\n" || e2etest.ExitCode(res) != 0 {
						fail("exec %s: %v %q", tag, err, res.Stdout)
						continue
					}
					record(&lat.exec, time.Since(start))
					body := bytes.Repeat([]byte(tag), 256)
					p := fmt.Sprintf("/tmp/w%d", w)
					start = time.Now()
					if _, err := s.Admin.WriteFile(ctx, id, p, bytes.NewReader(body)); err != nil {
						fail("write %s: %v", tag, err)
						continue
					}
					record(&lat.write, time.Since(start))
					start = time.Now()
					var got bytes.Buffer
					if _, err := s.Admin.DownloadFile(ctx, id, p, &got); err != nil || sha256.Sum256(got.Bytes()) != sha256.Sum256(body) {
						fail("read %s: %v", tag, err)
						continue
					}
					record(&lat.read, time.Since(start))
				}
			})
		}
	}
	wg.Wait()
	for _, l := range []struct {
		name string
		d    []time.Duration
	}{{"exec", lat.exec}, {"write", lat.write}, {"read", lat.read}} {
		t.Logf("%-5s n=%d p50=%v p90=%v p99=%v max=%v", l.name, len(l.d), pct(l.d, 50), pct(l.d, 90), pct(l.d, 99), pct(l.d, 100))
	}
	if len(errs) > 0 {
		t.Errorf("%d+ errors under load:\n%s", len(errs), strings.Join(errs, "\n"))
	}

	for _, id := range ids {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			if _, err := s.Admin.TerminateSandbox(context.WithoutCancel(ctx), id); err != nil {
				fail("terminate %s: %v", id, err)
			}
		})
	}
	wg.Wait()
	for _, id := range ids {
		if got, err := s.Admin.WaitSandbox(ctx, id, api.StateTerminated, 2*time.Minute); err != nil || got.State != api.StateTerminated {
			t.Errorf("terminate %s: %s %v", id, got.State, err)
		}
	}
	leaks := 0
	for _, id := range ids {
		if left := settledLeftovers(t, s, id); len(left) > 0 {
			leaks += len(left)
			t.Errorf("leaked by %s:\n%s", id, strings.Join(left, "\n"))
		}
	}
	if dirs, _ := filepath.Glob("/sys/fs/cgroup/*" + s.Cgroup + "/sbx_*"); len(dirs) > 0 {
		t.Errorf("cgroups left: %v", dirs)
	}
	if procs := cgroupProcs(s.Cgroup); len(procs) > 0 {
		t.Errorf("processes left in %s:\n%s", s.Cgroup, strings.Join(procs, "\n"))
	}
	if n := ownMounts(s); n > mountsBefore {
		t.Errorf("mounts under %s: %d before, %d after", s.DataDir, mountsBefore, n)
	}
	if children := descendants(s.PID()); len(children) > len(childrenBefore) {
		t.Errorf("server's processes: %d before, %d after:\n%s", len(childrenBefore), len(children), strings.Join(children, "\n"))
	}
	if out, err := runOut("nft", "list", "set", "inet", s.Table, "sandboxes"); err != nil || strings.Contains(out, "elements") {
		t.Errorf("fence %s after termination: %v\n%s", s.Table, err, out)
	}
	// Idle keep-alive connections of the test's own client may remain.
	if n := countFDs(s.PID()); n > fdsBefore+10 {
		t.Errorf("server descriptors: %d before, %d after", fdsBefore, n)
	}
	t.Logf("leaks: %d; server descriptors %d → %d; mounts %d → %d", leaks, fdsBefore, countFDs(s.PID()), mountsBefore, ownMounts(s))
}

func pct(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration{}, ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := (len(s) - 1) * p / 100
	return s[i].Round(100 * time.Microsecond)
}

// ownMounts counts the mounts under the server's data dir; other tests'
// mounts come and go beside it.
func ownMounts(s *e2etest.Server) int {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	n := 0
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line, s.DataDir+"/") {
			n++
		}
	}
	return n
}

// descendants lists the processes below pid (pid, command and state).
func descendants(pid int) []string {
	children := map[int][]int{}
	desc := map[int]string{}
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		// pid (comm) state ppid …; comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(b, ')')
		var child, ppid int
		var state string
		if i < 0 || len(b) < i+2 {
			continue
		}
		if _, err := fmt.Sscan(string(b[:bytes.IndexByte(b, ' ')]), &child); err != nil {
			continue
		}
		if _, err := fmt.Sscan(string(b[i+2:]), &state, &ppid); err != nil {
			continue
		}
		children[ppid] = append(children[ppid], child)
		desc[child] = fmt.Sprintf("%d %s %s", child, b[bytes.IndexByte(b, '(')+1:i], state)
	}
	var out []string
	queue := children[pid]
	for len(queue) > 0 {
		p := queue[0]
		queue = append(queue[1:], children[p]...)
		out = append(out, desc[p])
	}
	return out
}

// cgroupProcs lists the processes in any cgroup under parent, in every
// hierarchy.
func cgroupProcs(parent string) []string {
	var found []string
	roots, _ := filepath.Glob("/sys/fs/cgroup/*" + parent)
	for _, root := range roots {
		filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.Name() != "cgroup.procs" {
				return nil
			}
			if b, err := os.ReadFile(p); err == nil && len(bytes.TrimSpace(b)) > 0 {
				found = append(found, p+": "+strings.Join(strings.Fields(string(b)), " "))
			}
			return nil
		})
	}
	return found
}

// countFDs counts a process's descriptors but those of user namespaces:
// the runtime keeps the namespaces of recent host ID ranges open for the
// next sandboxes of those ranges, a cache bounded by its own size (see
// internal/node/runtime: usernsCacheSize), not a leak.
func countFDs(pid int) int {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	fds, _ := os.ReadDir(dir)
	n := 0
	for _, fd := range fds {
		if target, err := os.Readlink(filepath.Join(dir, fd.Name())); err == nil && strings.HasPrefix(target, "user:[") {
			continue
		}
		n++
	}
	return n
}
