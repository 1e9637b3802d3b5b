package runtime

import (
	"os"
	"path/filepath"
	"testing"
)

func writeFiles(t *testing.T, files map[string]string) {
	t.Helper()
	for p, v := range files {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestCgroupReader(t *testing.T) {
	t.Run("v1 and hybrid", func(t *testing.T) {
		root := t.TempDir()
		cpu, cpuacct, mem, unified := filepath.Join(root, "cpu"), filepath.Join(root, "cpuacct"), filepath.Join(root, "memory"), filepath.Join(root, "unified")
		writeFiles(t, map[string]string{
			filepath.Join(cpu, "cpu.shares"):                         "1024\n",
			filepath.Join(cpuacct, "cpuacct.usage"):                  "1\n",
			filepath.Join(mem, "memory.usage_in_bytes"):              "1\n",
			filepath.Join(unified, "cgroup.controllers"):             "",
			filepath.Join(cpuacct, "cove/sb1/cpuacct.usage"):         "5000000000\n",
			filepath.Join(mem, "cove/sb1/memory.usage_in_bytes"):     "314572800\n",
			filepath.Join(mem, "cove/sb1/memory.max_usage_in_bytes"): "419430400\n",
		})
		r, err := cgroupReaderFor([]string{cpu, cpuacct, mem, unified})
		if err != nil {
			t.Fatal(err)
		}
		var st Stats
		if err := r.Read("/cove/sb1", &st); err != nil {
			t.Fatal(err)
		}
		if want := (Stats{CPUNanos: 5e9, MemoryBytes: 300 << 20, MemoryPeakBytes: 400 << 20}); st != want {
			t.Errorf("stats = %+v; want %+v", st, want)
		}
		if err := r.Read("/cove/missing", &st); err == nil {
			t.Error("a missing cgroup read without an error")
		}
	})
	t.Run("v2", func(t *testing.T) {
		root := t.TempDir()
		writeFiles(t, map[string]string{
			filepath.Join(root, "cgroup.controllers"):      "cpu memory pids\n",
			filepath.Join(root, "cgroup.subtree_control"):  "cpu memory pids\n",
			filepath.Join(root, "cove/sb1/cpu.stat"):       "usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\n",
			filepath.Join(root, "cove/sb1/memory.current"): "1048576\n",
		})
		r, err := cgroupReaderFor([]string{root})
		if err != nil {
			t.Fatal(err)
		}
		var st Stats
		if err := r.Read("/cove/sb1", &st); err != nil {
			t.Fatal(err)
		}
		// No memory.peak (before Linux 5.19): the current value stands in.
		if want := (Stats{CPUNanos: 2.5e9, MemoryBytes: 1 << 20, MemoryPeakBytes: 1 << 20}); st != want {
			t.Errorf("stats = %+v; want %+v", st, want)
		}
	})
	t.Run("no accounting", func(t *testing.T) {
		if _, err := cgroupReaderFor([]string{t.TempDir()}); err == nil {
			t.Error("no error without cpu and memory hierarchies")
		}
	})
}

func TestDiskUsed(t *testing.T) {
	used, err := DiskUsed(t.TempDir())
	if err != nil || used <= 0 {
		t.Errorf("DiskUsed = %d, %v", used, err)
	}
}
