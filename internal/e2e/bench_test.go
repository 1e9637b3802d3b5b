package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"cove/api"
)

// BenchmarkCreateToFirstExec measures, in one run, a sandbox created through
// the API until its first command has finished, next to a bare `runc run` of
// /bin/true on the same image (no overlay, no user namespace, no agent): the
// floor any runc-based sandbox stands on. It reports both medians and their
// ratio.
func BenchmarkCreateToFirstExec(b *testing.B) {
	s := startServer(b)
	ctx := context.Background()
	bundle := runcBundle(b)
	var cove, bare []time.Duration
	for i := 0; b.Loop(); i++ {
		start := time.Now()
		sb, err := s.admin.CreateSandbox(ctx, api.CreateSandboxRequest{}, true)
		if err != nil || sb.State != api.StateRunning {
			b.Fatalf("create: %v %s", err, sb.StateReason)
		}
		res, err := s.admin.ExecWait(ctx, sb.ID, api.CreateCommandRequest{Argv: []string{"true"}})
		if err != nil || exitCode(res) != 0 {
			b.Fatalf("exec: %v %+v", err, res.Command)
		}
		cove = append(cove, time.Since(start))

		b.StopTimer()
		if _, err := s.admin.TerminateSandbox(ctx, sb.ID); err != nil {
			b.Fatal(err)
		}
		s.admin.WaitSandbox(ctx, sb.ID, api.StateTerminated, time.Minute)
		start = time.Now()
		id := fmt.Sprintf("cove-bench-%s-%d", runID, i)
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
	spec["root"] = map[string]any{"path": filepath.Join(imagesDir, "busybox", "rootfs"), "readonly": true}
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
