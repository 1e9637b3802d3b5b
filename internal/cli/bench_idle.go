package cli

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cove-dev/cove/api"
	cove "github.com/cove-dev/cove/sdk/go"
)

// The density measure: how many idle sandboxes a node holds at once, what
// each costs the host, and whether terminating them all gives everything
// back.

// hostView is what the host shows of a server and its sandboxes at one
// moment. A field is -1 when it could not be read.
type hostView struct {
	memAvailable int64 // /proc/meminfo MemAvailable, bytes
	slab         int64 // /proc/meminfo Slab: kernel objects, bytes
	serverRSS    int64 // the server's resident memory, bytes
	serverFDs    int   // the server's open descriptors, but user namespaces
	// serverUserNS are the server's descriptors of user namespaces: the
	// runtime keeps those of recent host ID ranges open (a bounded cache)
	// to start the next sandbox of the range without making one.
	serverUserNS int
	// tasks are the host's threads, every process's: each takes one of
	// kernel.pid_max's process IDs.
	tasks int
}

func readHostView(serverPID int) hostView {
	v := hostView{memAvailable: -1, slab: -1, serverRSS: -1, serverFDs: -1, tasks: countTasks()}
	if f, err := os.Open("/proc/meminfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fs := strings.Fields(sc.Text())
			if len(fs) < 2 {
				continue
			}
			kb, err := strconv.ParseInt(fs[1], 10, 64)
			if err != nil {
				continue
			}
			switch fs[0] {
			case "MemAvailable:":
				v.memAvailable = kb << 10
			case "Slab:":
				v.slab = kb << 10
			}
		}
		f.Close()
	}
	if serverPID > 0 {
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", serverPID)); err == nil {
			for _, line := range strings.Split(string(b), "\n") {
				if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
					kb, _ := strconv.ParseInt(f[1], 10, 64)
					v.serverRSS = kb << 10
				}
			}
		}
		dir := fmt.Sprintf("/proc/%d/fd", serverPID)
		if fds, err := os.ReadDir(dir); err == nil {
			v.serverFDs = 0
			for _, fd := range fds {
				if target, err := os.Readlink(filepath.Join(dir, fd.Name())); err == nil && strings.HasPrefix(target, "user:[") {
					v.serverUserNS++
				} else {
					v.serverFDs++
				}
			}
		}
	}
	return v
}

// countTasks counts the host's threads (-1 if /proc cannot be read).
func countTasks() int {
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return -1
	}
	n := 0
	for _, p := range procs {
		if p.Name()[0] < '0' || p.Name()[0] > '9' {
			continue
		}
		if tasks, err := os.ReadDir(filepath.Join("/proc", p.Name(), "task")); err == nil {
			n += len(tasks) // a process gone meanwhile counts nothing
		}
	}
	return n
}

// hostLimits says how near the host is to the limits that bound how many
// sandboxes it holds: its process IDs (threads), its memory and the
// server's descriptors. The bench adds it to a refusal it stopped at.
func hostLimits(v hostView, serverPID int) string {
	var parts []string
	if pidMax, err := readInt("/proc/sys/kernel/pid_max"); err == nil && v.tasks >= 0 {
		threadsMax, _ := readInt("/proc/sys/kernel/threads-max")
		parts = append(parts, fmt.Sprintf("%d threads of kernel.pid_max %d (kernel.threads-max %d)", v.tasks, pidMax, threadsMax))
	}
	if v.memAvailable >= 0 {
		parts = append(parts, fmt.Sprintf("%d MiB available", v.memAvailable>>20))
	}
	if serverPID > 0 && v.serverFDs >= 0 {
		limit := "?"
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", serverPID)); err == nil {
			for _, line := range strings.Split(string(b), "\n") {
				if rest, ok := strings.CutPrefix(line, "Max open files"); ok {
					if f := strings.Fields(rest); len(f) > 0 {
						limit = f[0] // the soft limit
					}
				}
			}
		}
		parts = append(parts, fmt.Sprintf("server descriptors %d of %s", v.serverFDs+v.serverUserNS, limit))
	}
	return "host when it stopped: " + strings.Join(parts, ", ")
}

func readInt(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

// idleOpts are the density flags of cove bench.
type idleOpts struct {
	target    int   // sandboxes to try to hold at once
	parallel  int   // creates in flight at once
	memoryMiB int64 // each sandbox's memory limit
	diskMiB   int64 // each sandbox's disk
}

// benchIdle creates up to o.target idle sandboxes, o.parallel at a time,
// stopping at the first refusal; measures them from the host; terminates
// them all and checks that the host got back what they took.
func benchIdle(ctx context.Context, cl *cove.Client, o benchOpts, res *BenchResult, step func(string)) {
	d := o.idle
	res.IdleTarget = ptr(d.target)
	pid, err := serverPID(cl.BaseURL())
	if err != nil {
		pid = 0
		res.Notes = append(res.Notes, "idle: the server's process is not visible here, so its memory and descriptors are not counted: "+err.Error())
	}
	before := readHostView(pid)

	step(fmt.Sprintf("up to %d idle sandboxes (%d MiB memory, %d MiB disk), %d at a time", d.target, d.memoryMiB, d.diskMiB, d.parallel))
	req := api.CreateSandboxRequest{
		Template:  o.template,
		Labels:    map[string]string{"cove-bench": "idle"},
		Resources: &api.ResourcesRequest{MemoryMiB: ptr(d.memoryMiB), DiskMiB: ptr(d.diskMiB)},
	}
	var (
		mu      sync.Mutex
		ids     []string // every sandbox made, running or not
		running []string
		stopped string
	)
	work := make(chan struct{})
	var wg sync.WaitGroup
	start := time.Now()
	for range max(d.parallel, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range work {
				sb, err := cl.CreateSandbox(ctx, req, true)
				mu.Lock()
				if sb.ID != "" {
					ids = append(ids, sb.ID)
				}
				switch {
				case err != nil && stopped == "":
					stopped = err.Error()
				case err == nil && sb.State != api.StateRunning && stopped == "":
					stopped = fmt.Sprintf("sandbox %s is %s: %s", sb.ID, sb.State, sb.StateReason)
				case err == nil && sb.State == api.StateRunning:
					running = append(running, sb.ID)
				}
				mu.Unlock()
			}
		}()
	}
	for range d.target {
		mu.Lock()
		done := stopped != "" || ctx.Err() != nil
		mu.Unlock()
		if done {
			break
		}
		work <- struct{}{}
	}
	close(work)
	wg.Wait()
	created := time.Since(start)
	var stoppedAt hostView
	if stopped != "" {
		stoppedAt = readHostView(pid)
	}

	time.Sleep(2 * time.Second) // let the agents settle
	held := readHostView(pid)
	n := len(running)
	res.IdleSandboxesMax = ptr(n)
	if stopped != "" {
		res.IdleStoppedBy = stopped
		res.Notes = append(res.Notes, fmt.Sprintf("idle_sandboxes_max: stopped at %d of %d: %s; %s", n, d.target, stopped, hostLimits(stoppedAt, pid)))
	}
	if n > 0 {
		res.IdleCreateS = ptr(created.Seconds())
	}
	if mib, err := cgroupMemoryMiB(running); err != nil {
		res.Notes = append(res.Notes, "idle_sandbox_mib: "+err.Error())
	} else {
		res.IdleSandboxMiB = ptr(mib)
	}
	perSandbox := func(a, b int64) *float64 {
		if n == 0 || a < 0 || b < 0 {
			return nil
		}
		return ptr(float64(b-a) / float64(n) / (1 << 20))
	}
	res.IdleHostMiB = perSandbox(held.memAvailable, before.memAvailable)
	res.IdleKernelMiB = perSandbox(before.slab, held.slab)
	res.IdleServerMiB = perSandbox(before.serverRSS, held.serverRSS)
	if n > 0 && before.tasks >= 0 && held.tasks >= 0 {
		res.IdleHostTasks = ptr(float64(held.tasks-before.tasks) / float64(n))
	}
	if n > 0 && before.serverFDs >= 0 && held.serverFDs >= 0 {
		res.IdleServerFDs = ptr(float64(held.serverFDs-before.serverFDs) / float64(n))
	}
	if held.serverRSS > 0 {
		res.ServerRSSMiB = ptr(float64(held.serverRSS) / (1 << 20))
	}

	step(fmt.Sprintf("terminate %d sandboxes and look for leftovers", len(ids)))
	res.IdleLeaks = []string{}
	start = time.Now()
	terminateAll(ctx, cl, ids, d.parallel, func(id string, err error) {
		res.IdleLeaks = append(res.IdleLeaks, fmt.Sprintf("sandbox %s did not terminate: %v", id, err))
	})
	if len(ids) > 0 {
		res.IdleTerminateS = ptr(time.Since(start).Seconds())
	}
	after := readHostView(pid)
	res.IdleLeaks = append(res.IdleLeaks, leftovers(before, after, ids)...)
	if after.serverUserNS > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("the server keeps %d user namespaces open for the next sandboxes of their host ID ranges (a bounded cache, not counted as left behind)", after.serverUserNS))
	}
}

// terminateAll terminates ids, parallel at a time, and waits until each is
// terminated; failed reports those that did not end.
func terminateAll(ctx context.Context, cl *cove.Client, ids []string, parallel int, failed func(string, error)) {
	var mu sync.Mutex
	work := make(chan string)
	var wg sync.WaitGroup
	for range max(parallel, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range work {
				_, err := cl.TerminateSandbox(ctx, id)
				if err == nil {
					var sb api.Sandbox
					sb, err = cl.WaitSandbox(ctx, id, api.StateTerminated, 2*time.Minute)
					if err == nil && sb.State != api.StateTerminated && sb.State != api.StateFailed {
						err = fmt.Errorf("still %s", sb.State)
					}
				}
				if err != nil {
					mu.Lock()
					failed(id, err)
					mu.Unlock()
				}
			}
		}()
	}
	for _, id := range ids {
		work <- id
	}
	close(work)
	wg.Wait()
}

// leftovers names what the sandboxes ids left on the host after their
// end: their cgroups, mounts, loop devices and network interfaces (which
// carry their IDs, so other work on the host is not counted), and the
// server's descriptors beyond a small slack.
func leftovers(before, after hostView, ids []string) []string {
	var out []string
	if before.serverFDs >= 0 && after.serverFDs > before.serverFDs+20 {
		out = append(out, fmt.Sprintf("server descriptors: %d before, %d after", before.serverFDs, after.serverFDs))
	}
	mountinfo, _ := os.ReadFile("/proc/self/mountinfo")
	var backing []string
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, f := range files {
		if b, err := os.ReadFile(f); err == nil {
			backing = append(backing, string(b))
		}
	}
	for _, id := range ids {
		if cgs, _ := filepath.Glob("/sys/fs/cgroup/*/*/" + id); len(cgs) > 0 {
			out = append(out, fmt.Sprintf("cgroups of %s remain: %s", id, strings.Join(cgs, " ")))
		}
		if n := strings.Count(string(mountinfo), id); n > 0 {
			out = append(out, fmt.Sprintf("%d mounts of %s remain", n, id))
		}
		for _, b := range backing {
			if strings.Contains(b, id) {
				out = append(out, fmt.Sprintf("a loop device of %s remains: %s", id, strings.TrimSpace(b)))
			}
		}
		if _, err := os.Stat("/sys/class/net/" + hostIface(id)); err == nil {
			out = append(out, fmt.Sprintf("network interface %s of %s remains", hostIface(id), id))
		}
	}
	return out
}

// hostIface is the host side of a sandbox's veth pair, named as the
// node's network fence names it.
func hostIface(id string) string {
	sum := sha256.Sum256([]byte(id))
	return "cv" + hex.EncodeToString(sum[:])[:12]
}
