package workloads

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
	cove "github.com/cove-dev/cove/sdk/go"
)

// noGPUs starts a server that reads its GPUs from an empty CDI directory:
// whatever the host has, this node has none.
func noGPUs(t *testing.T, opts ...e2etest.ServerOpt) *e2etest.Server {
	return e2etest.StartServer(t, append([]e2etest.ServerOpt{e2etest.WithArgs("--warm-pool", "0", "--cdi-spec-dirs", t.TempDir())}, opts...)...)
}

func submit(t *testing.T, c *cove.Client, req api.CreateWorkloadRequest) api.Workload {
	t.Helper()
	w, err := c.SubmitWorkload(t.Context(), req)
	if err != nil {
		t.Fatalf("submit %+v: %v", req, err)
	}
	if !strings.HasPrefix(w.ID, "wl_") || w.State != api.WorkloadQueued {
		t.Fatalf("submitted: %+v", w)
	}
	// A test that stops early leaves no container running (this runs
	// before the server's cleanup).
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		c.CancelWorkload(ctx, w.ID)
	})
	return w
}

// waitState waits for the workload to be in state (or to end).
func waitState(t *testing.T, c *cove.Client, id string, state api.WorkloadState) api.Workload {
	t.Helper()
	w, err := c.WaitWorkload(t.Context(), id, state, 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if w.State != state {
		t.Fatalf("workload %s is %s (%s), want %s", id, w.State, w.StateReason, state)
	}
	return w
}

// workloadEvents are the types of a workload's events, in order.
func workloadEvents(t *testing.T, c *cove.Client, id string) []string {
	t.Helper()
	l, err := c.Events(t.Context(), cove.EventQuery{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, e := range l.Items {
		if e.Data["workload_id"] == id {
			types = append(types, e.Type)
		}
	}
	return types
}

func int64p(v int64) *int64 { return &v }

// TestCPUWorkload: a python3 script from an asset runs to completion on
// the managed template; its output is followed while it runs (lines in
// the order printed), replayed after, and served raw; its exit code,
// events and cost are recorded.
func TestCPUWorkload(t *testing.T) {
	s := noGPUs(t, e2etest.WithManaged)
	c := s.Admin
	ctx := t.Context()
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "run.py"), []byte(`import sys, time
for i in range(6):
    print("line", i, flush=True)
    time.sleep(1)
print("to stderr", file=sys.stderr, flush=True)
sys.exit(3)
`), 0o644)
	a, err := c.CreateAssetFromDir(ctx, "script", dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	w := submit(t, c, api.CreateWorkloadRequest{
		Command: "python3 run.py", Source: &api.Source{Type: api.SourceAsset, AssetID: a.ID},
		Resources: &api.WorkloadResourcesRequest{},
	})
	waitState(t, c, w.ID, api.WorkloadRunning)

	// Follow from the start while it runs.
	var lines []string
	var exit *api.OutputRecord
	sawRunning := false
	err = c.WorkloadOutput(ctx, w.ID, 0, true, func(r api.OutputRecord) error {
		if r.Type == "exit" {
			exit = &r
			return nil
		}
		if r.Stream == "stdout" {
			if len(lines) == 0 {
				cur, err := c.GetWorkload(ctx, w.ID)
				if err != nil {
					return err
				}
				sawRunning = cur.State == api.WorkloadRunning
			}
			lines = append(lines, strings.Split(strings.TrimSpace(string(r.Data)), "\n")...)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"line 0", "line 1", "line 2", "line 3", "line 4", "line 5"}
	if !slices.Equal(lines, want) || exit == nil || exit.ExitCode == nil || *exit.ExitCode != 3 {
		t.Fatalf("followed: %q, exit %+v; want %q and exit 3", lines, exit, want)
	}
	if !sawRunning {
		t.Errorf("the first line came when the workload was no longer running: the follow was a replay")
	}

	done := waitState(t, c, w.ID, api.WorkloadExited)
	if done.ExitCode == nil || *done.ExitCode != 3 || done.StartedAt == nil || done.EndedAt == nil || done.CostUSD <= 0 ||
		done.Source.Digest != a.SHA256 || done.StdoutBytes == 0 || done.StderrBytes == 0 {
		t.Errorf("ended workload: %+v", done)
	}
	// Replay after the exit: the same records, then the exit.
	var replay bytes.Buffer
	var rexit *api.OutputRecord
	if err := c.WorkloadOutput(ctx, w.ID, 0, false, func(r api.OutputRecord) error {
		if r.Type == "exit" {
			rexit = &r
		} else if r.Stream == "stdout" {
			replay.Write(r.Data)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if got := strings.Split(strings.TrimSpace(replay.String()), "\n"); !slices.Equal(got, want) || rexit == nil || *rexit.ExitCode != 3 {
		t.Errorf("replayed: %q, exit %+v", got, rexit)
	}
	var raw bytes.Buffer
	if _, err := c.WorkloadStderr(ctx, w.ID, &raw); err != nil || raw.String() != "to stderr\n" {
		t.Errorf("raw stderr: %q, %v", raw.String(), err)
	}
	if got := workloadEvents(t, c, w.ID); !slices.Equal(got, []string{"workload.queued", "workload.started", "workload.exited"}) {
		t.Errorf("events: %v", got)
	}
	// Its container is gone; its output stays.
	if _, err := os.Stat(filepath.Join(s.DataDir, "sandboxes", w.ID)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("state dir of an ended workload: %v", err)
	}
	l, err := c.ListWorkloads(ctx, 0, "", api.WorkloadExited)
	if err != nil || len(l.Items) != 1 || l.Items[0].ID != w.ID {
		t.Errorf("list exited: %+v, %v", l, err)
	}
}

// TestGPURequests: a sandbox asking for GPUs is told to submit a
// workload; a team without the gpu admission is refused; a GPU workload
// on a node without GPUs waits queued with its reason (through a
// restart) and can be cancelled; another fails at max_queue_s.
func TestGPURequests(t *testing.T) {
	s := noGPUs(t)
	c := s.Admin
	ctx := t.Context()

	status, e, _ := e2etest.RawRequest(t, "POST", s.URL+"/v1/sandboxes", s.AdminKey, `{"resources": {"gpus": 1}}`)
	if status != 422 || !strings.Contains(e.Error.Message, "CPU-based") || !strings.Contains(e.Error.Message, "POST /v1/workloads") {
		t.Errorf("sandbox with a GPU: %d %+v", status, e.Error)
	}

	team := s.NewTeam("nogpu-" + e2etest.RunID())
	_, err := team.SubmitWorkload(ctx, api.CreateWorkloadRequest{Command: "nvidia-smi", Resources: &api.WorkloadResourcesRequest{GPUs: 1}})
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Code != api.CodePermissionDenied || !strings.Contains(ae.Message, `"gpu"`) || ae.Details["admission"] != "gpu" {
		t.Errorf("GPU workload without the gpu admission: %v", err)
	}

	w := submit(t, c, api.CreateWorkloadRequest{Command: "nvidia-smi", Resources: &api.WorkloadResourcesRequest{GPUs: 1}})
	// The queue's owner says what it waits for.
	var cur api.Workload
	for cur = w; !strings.Contains(cur.StateReason, "no node has GPUs"); {
		if cur, err = c.WaitWorkload(ctx, w.ID, api.WorkloadRunning, time.Second); err != nil {
			t.Fatal(err)
		}
		if cur.State != api.WorkloadQueued {
			t.Fatalf("GPU workload on a node without GPUs: %+v", cur)
		}
	}

	// The queue is stored: a restart keeps it.
	s.Stop(unix.SIGTERM)
	s.Start()
	if cur, err = c.GetWorkload(ctx, w.ID); err != nil || cur.State != api.WorkloadQueued {
		t.Fatalf("after a restart: %+v, %v", cur, err)
	}
	cancelled, err := c.CancelWorkload(ctx, w.ID)
	if err != nil || cancelled.State != api.WorkloadCancelled || cancelled.StartedAt != nil {
		t.Fatalf("cancel a queued workload: %+v, %v", cancelled, err)
	}
	if got := workloadEvents(t, c, w.ID); !slices.Equal(got, []string{"workload.queued", "workload.cancelled"}) {
		t.Errorf("events of the cancelled one: %v", got)
	}
	status, e, _ = e2etest.RawRequest(t, "GET", s.URL+"/v1/workloads/"+w.ID+"/output", s.AdminKey, "")
	if status != 409 {
		t.Errorf("output of a workload that never ran: %d %+v", status, e.Error)
	}

	late := submit(t, c, api.CreateWorkloadRequest{Argv: []string{"true"}, MaxQueueS: int64p(1), Resources: &api.WorkloadResourcesRequest{GPUs: 1}})
	failed := waitState(t, c, late.ID, api.WorkloadFailed)
	if !strings.Contains(failed.StateReason, "max_queue_s") || failed.StartedAt != nil {
		t.Errorf("past max_queue_s: %+v", failed)
	}
	if got := workloadEvents(t, c, late.ID); !slices.Equal(got, []string{"workload.queued", "workload.failed"}) {
		t.Errorf("events of the late one: %v", got)
	}
}

// TestRestart: a workload running when the server restarts is
// reattached: it runs on, its output is recorded whole, and its end is
// recorded by the new server.
func TestRestart(t *testing.T) {
	s := noGPUs(t)
	c := s.Admin
	marker := filepath.Join("/tmp", "go-on-"+e2etest.RunID())
	w := submit(t, c, api.CreateWorkloadRequest{
		Command: "echo before; while [ ! -e " + marker + " ]; do sleep 0.1; done; echo after", TimeoutS: int64p(300),
	})
	waitState(t, c, w.ID, api.WorkloadRunning)
	s.Stop(unix.SIGTERM)
	s.Start()
	if cur, err := c.GetWorkload(t.Context(), w.ID); err != nil || cur.State != api.WorkloadRunning {
		t.Fatalf("after the restart: %+v, %v", cur, err)
	}
	// The program goes on: let it end, from inside its own container.
	state := filepath.Join(s.DataDir, "sandboxes", w.ID, "rootfs", strings.TrimPrefix(marker, "/"))
	if err := os.WriteFile(state, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	done := waitState(t, c, w.ID, api.WorkloadExited)
	var out bytes.Buffer
	if _, err := c.WorkloadStdout(t.Context(), w.ID, &out); err != nil || out.String() != "before\nafter\n" || *done.ExitCode != 0 {
		t.Errorf("output across the restart: %q %v, exit %v", out.String(), err, done.ExitCode)
	}
	if got := workloadEvents(t, c, w.ID); !slices.Equal(got, []string{"workload.queued", "workload.started", "workload.exited"}) {
		t.Errorf("events: %v", got)
	}
	assertGone(t, s, w.ID)
}

// TestTimeout: timeout_s kills a long workload; its end is reported and
// its container, state dir and cgroup are gone.
func TestTimeout(t *testing.T) {
	s := noGPUs(t)
	c := s.Admin
	w := submit(t, c, api.CreateWorkloadRequest{Command: "echo started; sleep 600", TimeoutS: int64p(2)})
	done := waitState(t, c, w.ID, api.WorkloadFailed)
	if !done.TimedOut || done.ExitCode != nil || !strings.Contains(done.StateReason, "timeout") {
		t.Errorf("timed out workload: %+v", done)
	}
	var out bytes.Buffer
	if _, err := c.WorkloadStdout(t.Context(), w.ID, &out); err != nil || out.String() != "started\n" {
		t.Errorf("output: %q %v", out.String(), err)
	}
	if got := workloadEvents(t, c, w.ID); !slices.Equal(got, []string{"workload.queued", "workload.started", "workload.failed"}) {
		t.Errorf("events: %v", got)
	}
	assertGone(t, s, w.ID)
}

// assertGone checks that nothing of a workload's container is left.
func assertGone(t *testing.T, s *e2etest.Server, id string) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(s.DataDir, "sandboxes", id)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("state dir left: %v", err)
	}
	matches, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", strings.TrimPrefix(s.Cgroup, "/"), id))
	if m2, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", strings.TrimPrefix(s.Cgroup, "/"), id)); len(m2) > 0 {
		matches = append(matches, m2...)
	}
	if len(matches) > 0 {
		t.Errorf("cgroups left: %v", matches)
	}
	if out, _ := exec.Command("runc", "--root", filepath.Join(s.DataDir, "runc"), "list", "-q").Output(); strings.Contains(string(out), id) {
		t.Errorf("runc still lists %s", id)
	}
}

// TestGPUSpec: a node told to read a CDI directory (made here, with
// device nodes made by mknod) advertises its GPUs, places a GPU workload
// on one, and the runc spec of its container carries the CDI device,
// its cgroup rule, the spec's mounts, hooks (run by runc) and environment.
func TestGPUSpec(t *testing.T) {
	e2etest.RequireRoot(t)
	cdiDir := t.TempDir()
	// runc binds a device node into a container from the host path the
	// container sees it at (as /dev/nvidia0 is on a GPU host), through
	// the container's mapped root: the folder must be searchable.
	devDir, err := os.MkdirTemp("/tmp", "cove-gpu-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(devDir) })
	os.Chmod(devDir, 0o755)
	tag := e2etest.RunID() + fmt.Sprint(time.Now().UnixNano()%100000)
	lib := filepath.Join(devDir, "libcove-test.so")
	hooked := filepath.Join(devDir, "hooked")
	os.WriteFile(lib, []byte("fake driver library\n"), 0o644)
	var devices []map[string]any
	for i := range 2 {
		node := filepath.Join(devDir, fmt.Sprintf("gpu%d", i))
		if err := unix.Mknod(node, unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
			t.Fatal(err)
		}
		devices = append(devices, map[string]any{"name": fmt.Sprint(i), "containerEdits": map[string]any{
			"deviceNodes": []map[string]any{{"path": node}},
		}})
	}
	devices = append(devices, map[string]any{"name": "all", "containerEdits": map[string]any{
		"deviceNodes": []map[string]any{{"path": filepath.Join(devDir, "gpu0")}, {"path": filepath.Join(devDir, "gpu1")}},
	}})
	spec := map[string]any{
		"cdiVersion": "0.5.0", "kind": "nvidia.com/gpu", "devices": devices,
		"containerEdits": map[string]any{
			"env":    []string{"COVE_TEST_GPU=" + tag},
			"mounts": []map[string]any{{"hostPath": lib, "containerPath": "/usr/lib/libcove-test-" + tag + ".so", "options": []string{"ro", "nosuid", "nodev", "bind"}}},
			// runc runs createRuntime hooks on the host, as NVIDIA's
			// toolkit's run in the container's namespaces.
			"hooks": []map[string]any{{"hookName": "createRuntime", "path": "/bin/sh",
				"args": []string{"sh", "-c", "cat > " + hooked}}},
		},
	}
	raw, _ := json.Marshal(spec)
	os.WriteFile(filepath.Join(cdiDir, "cove-test.json"), raw, 0o644)

	s := e2etest.StartServer(t, e2etest.WithArgs("--warm-pool", "0", "--cdi-spec-dirs", cdiDir))
	c := s.Admin
	w := submit(t, c, api.CreateWorkloadRequest{
		Command:   "ls " + devDir + "; cat /usr/lib/libcove-test-*.so; sleep 600",
		Resources: &api.WorkloadResourcesRequest{GPUs: 1, GPUType: "nvidia.com/gpu"}, TimeoutS: int64p(600),
	})
	running := waitState(t, c, w.ID, api.WorkloadRunning)
	if h, err := c.Health(t.Context()); err != nil || h.GPUs == nil || *h.GPUs != (api.GPUHealth{Type: "nvidia.com/gpu", Count: 2, InUse: 1}) {
		t.Errorf("healthz gpus: %+v, %v", h.GPUs, err)
	}
	if !slices.Equal(running.Devices, []string{"nvidia.com/gpu=0"}) {
		t.Errorf("devices given: %v", running.Devices)
	}
	raw, err = os.ReadFile(filepath.Join(s.DataDir, "sandboxes", w.ID, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Process struct{ Env []string }
		Mounts  []struct{ Destination, Source string }
		Hooks   struct {
			CreateRuntime []struct{ Path string } `json:"createRuntime"`
		}
		Linux struct {
			Devices []struct {
				Path         string
				Type         string
				Major, Minor int64
			}
			Resources struct {
				Devices []struct {
					Allow        bool
					Type         string
					Major, Minor *int64
					Access       string
				}
			}
		}
	}
	if err := json.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	wantDev := filepath.Join(devDir, "gpu0")
	if !slices.ContainsFunc(cfg.Linux.Devices, func(d struct {
		Path         string
		Type         string
		Major, Minor int64
	}) bool {
		return d.Path == wantDev && d.Type == "c" && d.Major == 1 && d.Minor == 3
	}) || len(cfg.Linux.Devices) != 1 {
		t.Errorf("linux.devices: %+v; want only %s (c 1:3)", cfg.Linux.Devices, wantDev)
	}
	rules := cfg.Linux.Resources.Devices
	if len(rules) < 2 || rules[0].Allow || !rules[len(rules)-1].Allow || rules[len(rules)-1].Type != "c" ||
		*rules[len(rules)-1].Major != 1 || *rules[len(rules)-1].Minor != 3 {
		t.Errorf("device cgroup rules: %+v; want deny-all then allow c 1:3", rules)
	}
	if !slices.ContainsFunc(cfg.Mounts, func(m struct{ Destination, Source string }) bool {
		return m.Source == lib && m.Destination == "/usr/lib/libcove-test-"+tag+".so"
	}) {
		t.Errorf("mounts: %+v; want the CDI spec's library", cfg.Mounts)
	}
	if !slices.Contains(cfg.Process.Env, "COVE_TEST_GPU="+tag) {
		t.Errorf("env: %v", cfg.Process.Env)
	}
	if len(cfg.Hooks.CreateRuntime) != 1 || cfg.Hooks.CreateRuntime[0].Path != "/bin/sh" {
		t.Errorf("hooks: %+v", cfg.Hooks)
	}
	// The hook ran, given the container's state on its stdin.
	if b, err := os.ReadFile(hooked); err != nil || !strings.Contains(string(b), w.ID) {
		t.Errorf("the CDI hook's output: %q, %v", b, err)
	}
	// The second GPU is free for another workload; a third waits.
	w2 := submit(t, c, api.CreateWorkloadRequest{Command: "sleep 600", Resources: &api.WorkloadResourcesRequest{GPUs: 1}})
	if r2 := waitState(t, c, w2.ID, api.WorkloadRunning); !slices.Equal(r2.Devices, []string{"nvidia.com/gpu=1"}) {
		t.Errorf("second workload's devices: %v", r2.Devices)
	}
	w3 := submit(t, c, api.CreateWorkloadRequest{Command: "true", Resources: &api.WorkloadResourcesRequest{GPUs: 1}})
	for cur := w3; !strings.Contains(cur.StateReason, "2 of 2 are in use"); {
		if cur, err = c.WaitWorkload(t.Context(), w3.ID, api.WorkloadRunning, time.Second); err != nil || cur.State != api.WorkloadQueued {
			t.Fatalf("third GPU workload: %+v, %v", cur, err)
		}
	}
	// What the workload saw.
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	c.WorkloadOutput(ctx, w.ID, 0, true, func(r api.OutputRecord) error {
		out.Write(r.Data)
		if strings.Contains(out.String(), "fake driver") {
			cancel()
		}
		return nil
	})
	if got := out.String(); !strings.Contains(got, "gpu0") || !strings.Contains(got, "fake driver library") || strings.Contains(got, "gpu1") || strings.Contains(got, "libcove-test.so") {
		t.Errorf("inside the GPU workload: %q", got)
	}
	// Cancelling the first frees its GPU for the third.
	if cw, err := c.CancelWorkload(t.Context(), w.ID); err != nil || cw.State != api.WorkloadCancelled {
		t.Fatalf("cancel: %+v, %v", cw, err)
	}
	if r3 := waitState(t, c, w3.ID, api.WorkloadExited); !slices.Equal(r3.Devices, []string{"nvidia.com/gpu=0"}) {
		t.Errorf("third workload's devices: %v", r3.Devices)
	}
	c.CancelWorkload(t.Context(), w2.ID)
	waitState(t, c, w2.ID, api.WorkloadCancelled)
	for _, id := range []string{w.ID, w2.ID, w3.ID} {
		assertGone(t, s, id)
	}
}

// TestIsolation: a workload is isolated as a sandbox is, as user and as
// root in it: it sees none of the host's processes and reaches none of
// the host's addresses (loopback and its own), its policy being empty.
func TestIsolation(t *testing.T) {
	s := noGPUs(t)
	c := s.Admin
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(s.URL, "http://"))
	targets := []string{"127.0.0.1"}
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil && !ipn.IP.IsLoopback() {
			targets = append(targets, ipn.IP.String())
		}
	}
	script := "echo PIDS $(ls /proc | grep -cE '^[0-9]+$'); echo INIT $(tr '\\0' ' ' < /proc/1/cmdline); echo UID $(id -u) MAP $(cat /proc/self/uid_map);" +
		" ps -o comm | grep -E 'cove$|runc|e2e' && echo HOSTPROC;"
	for _, h := range targets {
		script += fmt.Sprintf(" wget -q -T 2 -O - http://%s:%s/healthz >/dev/null 2>&1 && echo REACHED %s;", h, port, h)
	}
	script += " echo DONE"
	for _, user := range []string{"user", "root"} {
		t.Run(user, func(t *testing.T) {
			w := submit(t, c, api.CreateWorkloadRequest{Command: script, User: user, TimeoutS: int64p(120)})
			done := waitState(t, c, w.ID, api.WorkloadExited)
			var out bytes.Buffer
			if _, err := c.WorkloadStdout(t.Context(), w.ID, &out); err != nil {
				t.Fatal(err)
			}
			got := out.String()
			t.Logf("workload as %s: %s", user, got)
			if !strings.Contains(got, "DONE") || strings.Contains(got, "REACHED") || strings.Contains(got, "HOSTPROC") || !strings.Contains(got, "INIT /.cove/cove-agent") {
				t.Errorf("workload as %s (exit %v): %q", user, done.ExitCode, got)
			}
			var pids int
			fmt.Sscanf(got[strings.Index(got, "PIDS ")+5:], "%d", &pids)
			if pids > 10 {
				t.Errorf("workload sees %d processes", pids)
			}
			f := strings.Fields(got[strings.Index(got, "MAP ")+4:])
			if len(f) < 3 || f[0] != "0" || f[1] == "0" {
				t.Errorf("uid map: %v; want root mapped to an unprivileged host uid", f[:min(3, len(f))])
			}
			wantUID := map[string]string{"user": "UID 1000", "root": "UID 0"}[user]
			if !strings.Contains(got, wantUID) {
				t.Errorf("as %s: %q", user, got)
			}
		})
	}
}

// TestCLI: `cove workloads submit --follow` streams a workload's output
// and exits with its status; list, get, logs and cancel show and act on
// it; a GPU request the node cannot place is reported as it waits.
func TestCLI(t *testing.T) {
	s := noGPUs(t)
	run := func(args ...string) (string, string, int) {
		t.Helper()
		cmd := exec.Command(filepath.Join(e2etest.BinDir(), "cove"), append([]string{"--url", s.URL}, args...)...)
		cmd.Env = append(os.Environ(), "COVE_API_KEY="+s.AdminKey, "HOME="+t.TempDir())
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return stdout.String(), stderr.String(), code
	}
	out, errOut, code := run("workloads", "submit", "--follow", "--command", "echo hello; echo oops >&2; exit 4")
	if out != "hello\n" || !strings.Contains(errOut, "oops") || code != 4 {
		t.Fatalf("submit --follow: %q %q exit %d", out, errOut, code)
	}
	// The output's exit record comes first; the state follows once the
	// container is removed.
	l, err := s.Admin.ListWorkloads(t.Context(), 0, "")
	if err != nil || len(l.Items) != 1 {
		t.Fatalf("list: %+v %v", l, err)
	}
	waitState(t, s.Admin, l.Items[0].ID, api.WorkloadExited)
	out, _, code = run("workloads", "list")
	if code != 0 || !strings.Contains(out, "exited") || !strings.Contains(out, "echo hello") {
		t.Errorf("list: %q", out)
	}
	id := strings.Fields(strings.Split(out, "\n")[1])[0]
	if out, _, code = run("workloads", "get", id); code != 0 || !strings.Contains(out, "exited") || !strings.Contains(out, "4") {
		t.Errorf("get: %q", out)
	}
	if out, _, code = run("workloads", "logs", id); code != 0 || out != "hello\n" {
		t.Errorf("logs: %q %d", out, code)
	}
	out, _, code = run("workloads", "submit", "--gpus", "1", "--", "nvidia-smi")
	if code != 0 || !strings.HasPrefix(out, "wl_") {
		t.Fatalf("submit a GPU workload: %q %d", out, code)
	}
	gid := strings.TrimSpace(out)
	if out, _, code = run("workloads", "cancel", gid); code != 0 || out != gid+" cancelled\n" {
		t.Errorf("cancel: %q %d", out, code)
	}
	if _, errOut, code = run("workloads", "submit", "--gpus", "1", "--max-queue", "1", "--follow", "--", "nvidia-smi"); code == 0 ||
		!strings.Contains(errOut, "max_queue_s") {
		t.Errorf("a GPU workload that cannot be placed, followed: %q %d", errOut, code)
	}
}
