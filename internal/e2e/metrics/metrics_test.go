// Package metrics runs `cove serve` with a short metrics interval and checks
// the samples against the kernel's own accounting: CPU from the sandbox's
// cgroup, memory, disk and network, kept after the sandbox terminated.
package metrics

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
	cove "github.com/cove-dev/cove/sdk/go"
)

func TestMain(m *testing.M) { e2etest.Main(m) }

const interval = time.Second

// samplesUntil polls the sandbox's raw samples in (from, now] until one has
// a time at or after until, and returns them all.
func samplesUntil(t *testing.T, c *cove.Client, ref string, from, until time.Time) []api.MetricSample {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		m, err := c.Metrics(t.Context(), ref, cove.MetricsQuery{From: from, To: time.Now().Add(time.Second), Step: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if n := len(m.Samples); n > 0 && !m.Samples[n-1].Time.Before(until) {
			return m.Samples
		}
		if time.Now().After(deadline) {
			t.Fatalf("no sample at or after %v within a minute (have %d)", until, len(m.Samples))
		}
		time.Sleep(interval / 4)
	}
}

// cpuacct reads the cgroup's own CPU accounting of a sandbox.
func cpuacct(t *testing.T, s *e2etest.Server, id string) time.Duration {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/cpuacct", s.Cgroup, id, "cpuacct.usage"))
	if err != nil {
		t.Skipf("this test reads cgroup v1 cpuacct directly: %v", err)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return time.Duration(n)
}

func TestSamples(t *testing.T) {
	s := e2etest.StartServer(t, e2etest.WithManaged, e2etest.WithArgs("--warm-pool", "0", "--metrics-interval", interval.String()))
	c := s.Admin
	cpus, mem := 1.0, int64(1024)
	sb := e2etest.Create(t, c, api.CreateSandboxRequest{Resources: &api.ResourcesRequest{CPUs: &cpus, MemoryMiB: &mem}})

	t.Run("cpu agrees with the cgroup", func(t *testing.T) {
		// Two samples first, so that the one before the window is known
		// (a sandbox's first sample counts from its start).
		samplesUntil(t, c, sb.ID, sb.CreatedAt, time.Now().Add(2*interval))
		t0 := time.Now()
		u0 := cpuacct(t, s, sb.ID)
		e2etest.MustOK(t, c, sb.ID, "timeout 10 sh -c 'while :; do :; done' || true")
		u1 := cpuacct(t, s, sb.ID)
		t1 := time.Now()
		all := samplesUntil(t, c, sb.ID, t0.Add(-10*interval), t1.Add(interval))
		// The samples whose intervals cover [t0, t1], and one more on
		// each side: a reading is stamped after it is read, and on a busy
		// host the two may be apart. Outside [t0, t1] the sandbox is idle.
		var used time.Duration
		var top int64
		var n int
		for i := 1; i < len(all); i++ {
			if !all[i].Time.After(t0.Add(-interval)) {
				continue
			}
			dt := all[i].Time.Sub(all[i-1].Time)
			used += time.Duration(float64(dt) * float64(all[i].CPUMillicores) / 1000)
			n++
			if all[i].Time.After(t0) && all[i].Time.Before(t1) {
				top = max(top, all[i].CPUMillicores)
			}
			if !all[i].Time.Before(t1.Add(interval)) {
				break
			}
		}
		cg := u1 - u0
		share := float64(cg) / float64(t1.Sub(t0))
		t.Logf("cgroup: %v of CPU in %v (%.0f%% of a CPU); samples: %v in %d samples, busiest %d millicores", cg, t1.Sub(t0), share*100, used, n, top)
		if diff := used - cg; diff > cg/10 || -diff > cg/10 {
			t.Errorf("samples add up to %v of CPU, the cgroup counted %v: more than 10%% apart", used, cg)
		}
		switch {
		case share >= 0.8 && top <= 700:
			t.Errorf("the busiest sample shows %d millicores; want > 700 for a loop that got %.0f%% of a CPU", top, share*100)
		case share < 0.8:
			// The host's other work left the loop less than 80% of a CPU:
			// the samples can only show what the cgroup got.
			t.Logf("host contended: the loop got %.0f%% of a CPU, so > 700 millicores is not expected; checking the busiest sample against it", share*100)
			if float64(top) < share*1000*0.7 {
				t.Errorf("the busiest sample shows %d millicores; the loop averaged %.0f", top, share*1000)
			}
		}
	})

	t.Run("memory", func(t *testing.T) {
		t0 := time.Now()
		e2etest.MustOK(t, c, sb.ID, `python3 -c "import time; b = b'x' * (300 << 20); time.sleep(3)"`)
		all := samplesUntil(t, c, sb.ID, t0, time.Now())
		var top, peak int64
		for _, smp := range all {
			top, peak = max(top, smp.MemoryBytes), max(peak, smp.MemoryPeakBytes)
		}
		t.Logf("memory: top %d MiB, peak %d MiB", top>>20, peak>>20)
		if top < 300<<20 || peak < 300<<20 {
			t.Errorf("memory top %d MiB, peak %d MiB; want both at least 300 MiB", top>>20, peak>>20)
		}
	})

	t.Run("disk", func(t *testing.T) {
		t0 := time.Now()
		before := samplesUntil(t, c, sb.ID, t0.Add(-5*interval), t0)
		d0 := before[len(before)-1].DiskBytes
		e2etest.MustOK(t, c, sb.ID, "head -c 100M /dev/urandom > /workspace/f && sync")
		after := samplesUntil(t, c, sb.ID, t0, time.Now().Add(interval))
		d1 := after[len(after)-1].DiskBytes
		t.Logf("disk: %d MiB before, %d MiB after", d0>>20, d1>>20)
		if d1-d0 < 100<<20 {
			t.Errorf("disk grew by %d bytes; want at least 100 MiB", d1-d0)
		}
	})

	t.Run("network", func(t *testing.T) {
		t0 := time.Now()
		// DNS queries reach the node's resolver through the interface.
		e2etest.Sh(t, c, sb.ID, "for i in 1 2 3 4 5; do getent hosts example.com; done")
		all := samplesUntil(t, c, sb.ID, t0, time.Now().Add(interval))
		var out, in int64
		for _, smp := range all {
			out, in = out+smp.NetOutBytes, in+smp.NetInBytes
		}
		t.Logf("network: %d bytes out, %d in", out, in)
		if out == 0 {
			t.Errorf("no bytes out after DNS queries")
		}
	})

	t.Run("rollups", func(t *testing.T) {
		m, err := c.Metrics(t.Context(), sb.ID, cove.MetricsQuery{From: sb.CreatedAt.Add(-time.Minute), To: time.Now(), Step: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if m.StepS != 60 || len(m.Samples) == 0 || m.Samples[0].CPUMillicoresMax == nil {
			t.Fatalf("1-minute step: %+v", m)
		}
	})

	t.Run("cli", func(t *testing.T) {
		cove := func(args ...string) string {
			t.Helper()
			cmd := exec.Command(filepath.Join(e2etest.BinDir(), "cove"), args...)
			cmd.Env = append(os.Environ(), "HOME="+s.Home, "COVE_URL="+s.URL, "COVE_API_KEY="+s.AdminKey)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("cove %v: %v\n%s", args, err, out)
			}
			return string(out)
		}
		out := cove("metrics", sb.ID, "--since", "10m")
		t.Logf("cove metrics:\n%s", out)
		for _, want := range []string{"cpu", "memory peak", "disk", "net out", "▁"} {
			if !strings.Contains(out, want) {
				t.Errorf("cove metrics lacks %q", want)
			}
		}
		var m api.Metrics
		if err := json.Unmarshal([]byte(cove("metrics", sb.ID, "--json")), &m); err != nil || len(m.Samples) == 0 {
			t.Errorf("cove metrics --json: %v, %d samples", err, len(m.Samples))
		}
		out = cove("usage", sb.ID)
		if !strings.Contains(out, "price per hour") {
			t.Errorf("cove usage REF:\n%s", out)
		}
		out = cove("usage", "--by", "sandbox")
		if !strings.Contains(out, sb.ID) || !strings.Contains(out, "this month") {
			t.Errorf("cove usage --by sandbox:\n%s", out)
		}
	})

	t.Run("kept after terminate", func(t *testing.T) {
		if _, err := c.TerminateSandbox(t.Context(), sb.ID); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		if _, err := c.WaitSandbox(ctx, sb.ID, api.StateTerminated, time.Minute); err != nil {
			t.Fatal(err)
		}
		m, err := c.Metrics(t.Context(), sb.ID, cove.MetricsQuery{From: sb.CreatedAt, To: time.Now().Add(5 * time.Second), Step: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if len(m.Samples) < 10 {
			t.Errorf("%d samples after terminate; want those of the test", len(m.Samples))
		}
		if n := len(m.Gaps); n == 0 || m.Gaps[n-1].Reason != "terminated" {
			t.Errorf("gaps = %+v; want the last one terminated", m.Gaps)
		}
	})
}
