package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
)

// BenchmarkCreateToFirstExec measures, in one run, a sandbox created through
// the API until its first command has finished, next to a bare `runc run` of
// /bin/true on the same image (no overlay, no user namespace, no agent): the
// floor any runc-based sandbox stands on. It reports both medians and their
// ratio.
func BenchmarkCreateToFirstExec(b *testing.B) {
	s := e2etest.StartServer(b)
	ctx := context.Background()
	bundle := runcBundle(b)
	var cove, bare []time.Duration
	for i := 0; b.Loop(); i++ {
		start := time.Now()
		sb, err := s.Admin.CreateSandbox(ctx, api.CreateSandboxRequest{}, true)
		if err != nil || sb.State != api.StateRunning {
			b.Fatalf("create: %v %s", err, sb.StateReason)
		}
		res, err := s.Admin.ExecWait(ctx, sb.ID, api.CreateCommandRequest{Argv: []string{"true"}})
		if err != nil || e2etest.ExitCode(res) != 0 {
			b.Fatalf("exec: %v %+v", err, res.Command)
		}
		cove = append(cove, time.Since(start))

		b.StopTimer()
		if _, err := s.Admin.TerminateSandbox(ctx, sb.ID); err != nil {
			b.Fatal(err)
		}
		s.Admin.WaitSandbox(ctx, sb.ID, api.StateTerminated, time.Minute)
		start = time.Now()
		id := fmt.Sprintf("cove-bench-%s-%d", e2etest.RunID(), i)
		out, err := exec.Command("runc", "--root", filepath.Join(bundle, "state"), "run", "--bundle", bundle, id).CombinedOutput()
		if err != nil {
			b.Fatalf("runc run: %v %s", err, out)
		}
		bare = append(bare, time.Since(start))
		b.StartTimer()
	}
	c, r := median(cove), median(bare)
	b.ReportMetric(float64(c.Microseconds())/1000, "create-exec-ms")
	b.ReportMetric(float64(r.Microseconds())/1000, "runc-run-ms")
	b.ReportMetric(float64(c)/float64(r), "ratio")
}

// runcBundle makes a plain runc bundle over the busybox image that runs
// /bin/true.
func runcBundle(b *testing.B) string {
	b.Helper()
	dir, err := os.MkdirTemp("/var/tmp", "cove-bench-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	if out, err := exec.Command("runc", "spec", "--bundle", dir).CombinedOutput(); err != nil {
		b.Fatalf("runc spec: %v %s", err, out)
	}
	p := filepath.Join(dir, "config.json")
	raw, err := os.ReadFile(p)
	if err != nil {
		b.Fatal(err)
	}
	var spec map[string]any
	if err := json.Unmarshal(raw, &spec); err != nil {
		b.Fatal(err)
	}
	spec["root"] = map[string]any{"path": filepath.Join(e2etest.ImagesDir(), "v2", "busybox", "rootfs"), "readonly": true}
	proc := spec["process"].(map[string]any)
	proc["terminal"] = false
	proc["args"] = []string{"/bin/true"}
	raw, _ = json.Marshal(spec)
	if err := os.WriteFile(p, raw, 0o644); err != nil {
		b.Fatal(err)
	}
	return dir
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration{}, ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

// BenchmarkOutputThroughput streams `head -c 1G /dev/zero` from a sandbox
// through the agent, the node's recorder and the API's NDJSON stream to a
// client, next to a plain host pipe and a pipe inside the sandbox (under its
// 1-CPU quota) of the same bytes in the same run, and samples the server's
// resident memory while it streams.
func BenchmarkOutputThroughput(b *testing.B) {
	s := e2etest.StartServer(b)
	ctx := context.Background()
	sb := e2etest.Create(b, s.Admin, api.CreateSandboxRequest{})
	const size = 1 << 30
	var apiRate, pipeRate, inRate []float64
	var maxRSS int64
	for b.Loop() {
		stop := make(chan struct{})
		sampled := make(chan int64)
		go func() { sampled <- sampleRSS(s.PID(), stop) }()
		start := time.Now()
		cmd, err := s.Admin.Exec(ctx, sb.ID, api.CreateCommandRequest{Argv: []string{"head", "-c", fmt.Sprint(size), "/dev/zero"}})
		if err != nil {
			b.Fatal(err)
		}
		var n int64
		if err := s.Admin.Output(ctx, sb.ID, cmd.ID, 0, true, func(r api.OutputRecord) error {
			n += int64(len(r.Data))
			return nil
		}); err != nil {
			b.Fatal(err)
		}
		apiRate = append(apiRate, float64(n)/time.Since(start).Seconds()/1e6)
		close(stop)
		maxRSS = max(maxRSS, <-sampled)
		if n != size {
			b.Fatalf("streamed %d bytes, want %d", n, size)
		}

		b.StopTimer()
		start = time.Now()
		out, err := exec.Command("sh", "-c", fmt.Sprintf("head -c %d /dev/zero | cat > /dev/null", size)).CombinedOutput()
		if err != nil {
			b.Fatalf("pipe: %v %s", err, out)
		}
		pipeRate = append(pipeRate, size/time.Since(start).Seconds()/1e6)
		// The same bytes through a pipe inside the sandbox, under its CPU
		// quota: what the producer can do at all.
		start = time.Now()
		res := e2etest.Sh(b, s.Admin, sb.ID, fmt.Sprintf("head -c %d /dev/zero | wc -c", size))
		if strings.TrimSpace(res.Stdout) != fmt.Sprint(size) {
			b.Fatalf("in-sandbox pipe: %q", res.Stdout)
		}
		inRate = append(inRate, size/time.Since(start).Seconds()/1e6)
		b.StartTimer()
	}
	a, p := medianF(apiRate), medianF(pipeRate)
	b.ReportMetric(a, "api-MB/s")
	b.ReportMetric(p, "pipe-MB/s")
	b.ReportMetric(a/p, "ratio")
	b.ReportMetric(medianF(inRate), "sandbox-pipe-MB/s")
	b.ReportMetric(float64(maxRSS)/(1<<20), "server-max-rss-MiB")
}

func medianF(v []float64) float64 {
	s := append([]float64{}, v...)
	sort.Float64s(s)
	return s[len(s)/2]
}

// sampleRSS returns the largest VmRSS of pid, in bytes, seen until stop.
func sampleRSS(pid int, stop <-chan struct{}) int64 {
	var most int64
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		most = max(most, rss(pid))
		select {
		case <-stop:
			return most
		case <-t.C:
		}
	}
}

func rss(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			var kb int64
			fmt.Sscan(f[1], &kb)
			return kb << 10
		}
	}
	return 0
}

// BenchmarkSleepWake measures sleep (stop, save, release) and wake
// (restore, start) of a sandbox holding 100 MiB of random bytes, each until
// the state is reached.
func BenchmarkSleepWake(b *testing.B) {
	s := e2etest.StartServer(b)
	ctx := context.Background()
	sb := e2etest.Create(b, s.Admin, api.CreateSandboxRequest{})
	e2etest.MustOK(b, s.Admin, sb.ID, "head -c 104857600 /dev/urandom > /workspace/random.bin")
	var sleeps, wakes []time.Duration
	for b.Loop() {
		start := time.Now()
		if _, err := s.Admin.SleepSandbox(ctx, sb.ID); err != nil {
			b.Fatal(err)
		}
		if got, err := s.Admin.WaitSandbox(ctx, sb.ID, api.StateAsleep, 5*time.Minute); err != nil || got.State != api.StateAsleep {
			b.Fatalf("sleep: %s %v", got.State, err)
		}
		sleeps = append(sleeps, time.Since(start))
		start = time.Now()
		if _, err := s.Admin.WakeSandbox(ctx, sb.ID); err != nil {
			b.Fatal(err)
		}
		if got, err := s.Admin.WaitSandbox(ctx, sb.ID, api.StateRunning, 5*time.Minute); err != nil || got.State != api.StateRunning {
			b.Fatalf("wake: %s %v", got.State, err)
		}
		wakes = append(wakes, time.Since(start))
	}
	b.ReportMetric(median(sleeps).Seconds(), "sleep-100MiB-s")
	b.ReportMetric(median(wakes).Seconds(), "wake-100MiB-s")
}
