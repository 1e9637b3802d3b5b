package runtime

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// cgroupMounts lists the mount points of every cgroup hierarchy, v1 and
// v2, each once.
func cgroupMounts() ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	seen := map[string]bool{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// id parent maj:min root mountpoint options [optional...] - fstype source superoptions
		fields := strings.Fields(sc.Text())
		sep := -1
		for i, f := range fields {
			if f == "-" {
				sep = i
				break
			}
		}
		if sep < 5 || sep+1 >= len(fields) {
			continue
		}
		if fstype := fields[sep+1]; fstype != "cgroup" && fstype != "cgroup2" {
			continue
		}
		if fields[3] != "/" {
			continue // a bind of a sub-tree: the hierarchy is mounted elsewhere too
		}
		key := fields[2] + " " + fields[sep+3] // device and superoptions name the hierarchy
		if seen[key] {
			continue
		}
		seen[key] = true
		out = append(out, fields[4])
	}
	return out, sc.Err()
}

// cgroupDirs returns the directory of cgroup path (like "/cove/sb1") in
// every hierarchy where it exists.
func cgroupDirs(path string) ([]string, error) {
	mounts, err := cgroupMounts()
	if err != nil {
		return nil, err
	}
	var dirs []string
	for _, mp := range mounts {
		dir := filepath.Join(mp, path)
		if _, err := os.Stat(dir); err == nil {
			dirs = append(dirs, dir)
		}
	}
	return dirs, nil
}

// cgroupPids returns the processes in dir (not in its children).
func cgroupPids(dir string) ([]int, error) {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("%s/cgroup.procs: %w", dir, err)
		}
		pids = append(pids, pid)
	}
	return pids, nil
}

// removeCgroup kills whatever still runs in cgroup path and removes its
// directory, children first, in every hierarchy.
func removeCgroup(ctx context.Context, path string) error {
	dirs, err := cgroupDirs(path)
	if err != nil {
		return err
	}
	// A frozen process dies only once thawed.
	for _, dir := range dirs {
		os.WriteFile(filepath.Join(dir, "freezer.state"), []byte("THAWED"), 0) // v1
		os.WriteFile(filepath.Join(dir, "cgroup.freeze"), []byte("0"), 0)      // v2
	}
	var errs []error
	for _, dir := range dirs {
		// Children first (the sandbox cannot create any through its
		// read-only cgroupfs, but a leftover of a crash might).
		var tree []string
		filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				tree = append(tree, p)
			}
			return nil
		})
		for i := len(tree) - 1; i >= 0; i-- {
			if err := removeCgroupDir(ctx, tree[i]); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

func removeCgroupDir(ctx context.Context, dir string) error {
	delay := time.Millisecond
	for {
		err := unix.Rmdir(dir)
		if err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("remove cgroup %s: %w", dir, err)
		}
		pids, perr := cgroupPids(dir)
		if perr != nil && !errors.Is(perr, fs.ErrNotExist) {
			return fmt.Errorf("remove cgroup %s: %w", dir, perr)
		}
		for _, pid := range pids {
			unix.Kill(pid, unix.SIGKILL)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("remove cgroup %s: %w (processes left: %v)", dir, context.Cause(ctx), pids)
		case <-time.After(delay):
		}
		delay = min(2*delay, 100*time.Millisecond)
	}
}

// swapAccounting reports whether memory+swap can be limited: cgroup v1
// needs memory.memsw.limit_in_bytes (swapaccount=1); on a host without a
// v1 memory hierarchy (pure cgroup v2) runc uses memory.swap.max.
func swapAccounting() bool {
	mounts, err := cgroupMounts()
	if err != nil {
		return false
	}
	v1memory := false
	for _, mp := range mounts {
		if _, err := os.Stat(filepath.Join(mp, "memory.limit_in_bytes")); err != nil {
			continue
		}
		v1memory = true
		if _, err := os.Stat(filepath.Join(mp, "memory.memsw.limit_in_bytes")); err == nil {
			return true
		}
	}
	return !v1memory
}
