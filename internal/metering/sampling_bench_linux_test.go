package metering

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/node"
	"github.com/cove-dev/cove/internal/node/network"
	"github.com/cove-dev/cove/internal/node/runtime"
)

// BenchmarkSample200 is the node's share of one meter tick over 200
// sandboxes, on fake cgroup and interface trees of the same files the
// kernel shows: per sandbox the CPU and memory accounting, a statfs of its
// disk, its interface's two byte counters, and the sample's arithmetic.
// One op is one tick; at a 5 s interval the meter's CPU share is
// ns/op ÷ 5e9.
func BenchmarkSample200(b *testing.B) {
	const n = 200
	root := b.TempDir()
	cpu, mem, net, disk := filepath.Join(root, "cpuacct"), filepath.Join(root, "memory"), filepath.Join(root, "net"), filepath.Join(root, "disk")
	write := func(p, v string) {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(v+"\n"), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("sbx_%04d", i)
		cg := "/cove/" + ids[i]
		write(filepath.Join(cpu, cg, "cpuacct.usage"), "123456789012")
		write(filepath.Join(mem, cg, "memory.usage_in_bytes"), "314572800")
		write(filepath.Join(mem, cg, "memory.max_usage_in_bytes"), "419430400")
		write(filepath.Join(net, "cv"+ids[i], "statistics", "tx_bytes"), "1048576")
		write(filepath.Join(net, "cv"+ids[i], "statistics", "rx_bytes"), "2097152")
		if err := os.MkdirAll(filepath.Join(disk, ids[i]), 0o755); err != nil {
			b.Fatal(err)
		}
	}
	cg := runtime.NewCgroupReaderAt(cpu, mem)
	prev := make([]node.Stats, n)
	b.ReportAllocs()
	cpu0 := cpuTime()
	for b.Loop() {
		now := time.Now()
		for i, id := range ids {
			var st runtime.Stats
			if err := cg.Read("/cove/"+id, &st); err != nil {
				b.Fatal(err)
			}
			used, err := runtime.DiskUsed(filepath.Join(disk, id))
			if err != nil {
				b.Fatal(err)
			}
			in, out, ok := network.IfaceCounters(net, "cv"+id)
			if !ok {
				b.Fatal("no counters")
			}
			cur := node.Stats{Time: now, CPUNanos: st.CPUNanos, MemoryBytes: st.MemoryBytes, MemoryPeakBytes: st.MemoryPeakBytes,
				DiskBytes: used, NetInBytes: in, NetOutBytes: out}
			Diff(prev[i], cur)
			prev[i] = cur
		}
	}
	// CPU time (user and system, the whole process) rather than wall
	// time: on a shared host the wall clock counts other work too.
	cpuNs := float64(cpuTime()-cpu0) / float64(b.N)
	b.ReportMetric(cpuNs, "cpu-ns/op")
	b.ReportMetric(cpuNs/5e9*100, "%cpu@5s")
}

// cpuTime is the CPU time this process used so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
