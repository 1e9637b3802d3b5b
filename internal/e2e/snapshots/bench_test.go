package snapshots

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
)

// BenchmarkFork forks parents of 10 MiB and 1 GiB into 20 sandboxes each
// (`make bench`), in the same run, and reports per fork the time the fork
// call took (answered once all run) and the data disk it took (the forks'
// own disks, the layer and the snapshot's save together, divided by the
// count), beside a sleep and wake of the same parent: what carrying its
// files to a new sandbox costs without layers. Every fork's tree is
// checked byte-identical to the parent's, and a write in one absent from
// the others.
func BenchmarkFork(b *testing.B) {
	const count = 20
	for _, mib := range []int{10, 1024} {
		b.Run(fmt.Sprintf("parent=%dMiB", mib), func(b *testing.B) {
			s := e2etest.StartServer(b, e2etest.WithArgs("--warm-pool", "0", "--max-fork", "100"))
			c, ctx := s.Admin, b.Context()
			for b.Loop() {
				parent := e2etest.Create(b, c, api.CreateSandboxRequest{Resources: &api.ResourcesRequest{DiskMiB: ptr(int64(mib + 1024))}})
				files := max(mib/16, 1)
				e2etest.MustOK(b, c, parent.ID, fmt.Sprintf(`set -e; mkdir -p /workspace/data; cd /workspace/data
for i in $(seq 1 %d); do dd if=/dev/urandom of=f$i bs=1M count=%d 2>/dev/null; done`, files, mib/files), e2etest.WithTimeout(1800))
				want := e2etest.MustOK(b, c, parent.ID, treeSum("/workspace"), e2etest.WithTimeout(1800))

				t0 := time.Now()
				forks, err := c.ForkSandbox(ctx, parent.ID, api.ForkSandboxRequest{Count: count}, true)
				forkTime := time.Since(t0)
				if err != nil || len(forks) != count {
					b.Fatalf("fork: %d %v", len(forks), err)
				}
				sandboxes := filepath.Join(s.DataDir, "sandboxes")
				var disk int64
				for _, f := range forks {
					disk += allocated(filepath.Join(sandboxes, f.ID, "disk.img"))
				}
				disk += dirAllocated(b, filepath.Join(sandboxes, ".layers")) + dirAllocated(b, filepath.Join(s.DataDir, "saves"))
				for i, f := range forks {
					if got := e2etest.MustOK(b, c, f.ID, treeSum("/workspace"), e2etest.WithTimeout(1800)); got != want {
						b.Fatalf("fork %d: tree %s, parent's %s", i, got, want)
					}
				}
				e2etest.MustOK(b, c, forks[0].ID, "echo only0 > /workspace/data/f1")
				for _, f := range forks[1:] {
					if out := e2etest.MustOK(b, c, f.ID, "head -c 5 /workspace/data/f1 | grep -c only0 || true"); strings.TrimSpace(out) != "0" {
						b.Fatalf("%s sees fork 0's write", f.ID)
					}
				}
				for _, f := range forks {
					c.TerminateSandbox(ctx, f.ID)
				}

				// The same files carried by a sleep and a wake.
				t0 = time.Now()
				if _, err := c.SleepSandbox(ctx, parent.ID); err != nil {
					b.Fatal(err)
				}
				if _, err := c.WaitSandbox(ctx, parent.ID, api.StateAsleep, 30*time.Minute); err != nil {
					b.Fatal(err)
				}
				slept := time.Since(t0)
				save := dirAllocated(b, filepath.Join(s.DataDir, "saves", parent.ID))
				t0 = time.Now()
				if _, err := c.WakeSandbox(ctx, parent.ID); err != nil {
					b.Fatal(err)
				}
				if sb, err := c.WaitSandbox(ctx, parent.ID, api.StateRunning, 30*time.Minute); err != nil || sb.State != api.StateRunning {
					b.Fatalf("wake: %v", err)
				}
				woke := time.Since(t0)
				restored := allocated(filepath.Join(sandboxes, parent.ID, "disk.img"))

				b.ReportMetric(float64(forkTime.Milliseconds())/count, "ms/fork")
				b.ReportMetric(float64(disk)/count/(1<<20), "MiB-disk/fork")
				b.ReportMetric(float64(forkTime.Milliseconds()), "ms/fork-call")
				b.ReportMetric(float64(slept.Milliseconds()), "ms/sleep")
				b.ReportMetric(float64(woke.Milliseconds()), "ms/wake")
				b.ReportMetric(float64(save+restored)/(1<<20), "MiB-disk/sleep+wake")
				c.TerminateSandbox(ctx, parent.ID)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }
