package runtime

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// Stats are the counters of one sandbox that the runtime reads: its
// cgroup's CPU and memory accounting and its disk's usage.
type Stats struct {
	CPUNanos        uint64
	MemoryBytes     int64
	MemoryPeakBytes int64
	DiskBytes       int64
}

// CgroupReader reads CPU and memory accounting of cgroups. It finds the
// hierarchies once: the v1 cpuacct and memory controllers when they are
// mounted (cgroup v1 and hybrid hosts, where runc puts the controllers
// there), else the unified (v2) hierarchy.
type CgroupReader struct {
	// cpu and mem are the roots of the hierarchies holding each
	// controller; v2 tells which files to read.
	cpu, mem string
	cpuV2    bool
	memV2    bool
}

// NewCgroupReader finds the hierarchies of the cpu and memory accounting
// among the host's cgroup mounts.
func NewCgroupReader() (*CgroupReader, error) {
	mounts, err := cgroupMounts()
	if err != nil {
		return nil, err
	}
	return cgroupReaderFor(mounts)
}

// cgroupReaderFor picks the hierarchies among the mount points given.
func cgroupReaderFor(mounts []string) (*CgroupReader, error) {
	r := &CgroupReader{}
	var unified string
	for _, mp := range mounts {
		switch {
		case exists(filepath.Join(mp, "cpuacct.usage")):
			r.cpu = mp
		case exists(filepath.Join(mp, "memory.usage_in_bytes")):
			r.mem = mp
		case exists(filepath.Join(mp, "cgroup.controllers")):
			unified = mp
		}
	}
	if unified != "" {
		ctrl, _ := os.ReadFile(filepath.Join(unified, "cgroup.subtree_control"))
		fields := bytes.Fields(ctrl)
		if r.cpu == "" && (contains(fields, "cpu") || exists(filepath.Join(unified, "cpu.stat"))) {
			r.cpu, r.cpuV2 = unified, true
		}
		if r.mem == "" && contains(fields, "memory") {
			r.mem, r.memV2 = unified, true
		}
	}
	if r.cpu == "" || r.mem == "" {
		return nil, fmt.Errorf("no cgroup hierarchy with cpu and memory accounting among %v", mounts)
	}
	return r, nil
}

// NewCgroupReaderAt reads v1-style accounting files under two roots: for
// tests and benchmarks over fake cgroup trees.
func NewCgroupReaderAt(cpuRoot, memRoot string) *CgroupReader {
	return &CgroupReader{cpu: cpuRoot, mem: memRoot}
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

func contains(fields [][]byte, s string) bool {
	for _, f := range fields {
		if string(f) == s {
			return true
		}
	}
	return false
}

// Read returns the CPU time and memory of cgroup path (like "/cove/sbx_1").
func (r *CgroupReader) Read(path string, st *Stats) error {
	var buf [512]byte
	cpu := filepath.Join(r.cpu, path)
	mem := filepath.Join(r.mem, path)
	if r.cpuV2 {
		b, err := readSmall(filepath.Join(cpu, "cpu.stat"), buf[:])
		if err != nil {
			return err
		}
		usec, err := statField(b, "usage_usec")
		if err != nil {
			return fmt.Errorf("%s/cpu.stat: %w", cpu, err)
		}
		st.CPUNanos = uint64(usec) * 1000
	} else {
		n, err := readInt(filepath.Join(cpu, "cpuacct.usage"), buf[:])
		if err != nil {
			return err
		}
		st.CPUNanos = uint64(n)
	}
	cur, peak := "memory.usage_in_bytes", "memory.max_usage_in_bytes"
	if r.memV2 {
		cur, peak = "memory.current", "memory.peak"
	}
	var err error
	if st.MemoryBytes, err = readInt(filepath.Join(mem, cur), buf[:]); err != nil {
		return err
	}
	if st.MemoryPeakBytes, err = readInt(filepath.Join(mem, peak), buf[:]); err != nil {
		// memory.peak came with Linux 5.19: the current value is a floor.
		st.MemoryPeakBytes = st.MemoryBytes
	}
	return nil
}

// readSmall reads a small file into buf (no allocation beyond the open).
func readSmall(path string, buf []byte) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	n, err := unix.Read(fd, buf)
	if err != nil {
		return nil, &os.PathError{Op: "read", Path: path, Err: err}
	}
	return buf[:n], nil
}

func readInt(path string, buf []byte) (int64, error) {
	b, err := readSmall(path, buf)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(string(bytes.TrimSpace(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	return n, nil
}

// statField finds "name value" in a flat keyed file such as cpu.stat.
func statField(b []byte, name string) (int64, error) {
	for line := range bytes.SplitSeq(b, []byte("\n")) {
		k, v, ok := bytes.Cut(line, []byte(" "))
		if ok && string(k) == name {
			return strconv.ParseInt(string(bytes.TrimSpace(v)), 10, 64)
		}
	}
	return 0, fmt.Errorf("no %s", name)
}

// DiskUsed is what the files on the file system mounted at dir take:
// its blocks less its free blocks.
func DiskUsed(dir string) (int64, error) {
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err != nil {
		return 0, &os.PathError{Op: "statfs", Path: dir, Err: err}
	}
	return int64(fs.Blocks-fs.Bfree) * int64(fs.Bsize), nil
}

// Stats reads a running sandbox's CPU time, memory and disk usage.
func (r *Runtime) Stats(id string) (Stats, error) {
	var st Stats
	cg, err := r.cgroups()
	if err != nil {
		return st, err
	}
	if err := cg.Read(r.cgroupPath(id), &st); err != nil {
		return st, fmt.Errorf("stats of %s: %w", id, err)
	}
	if st.DiskBytes, err = DiskUsed(filepath.Join(r.StateDir(id), diskDir)); err != nil {
		return st, fmt.Errorf("stats of %s: %w", id, err)
	}
	return st, nil
}
