package runtime

import (
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Kernel limits per user that sandboxes would otherwise share.
//
// Keyrings (kernel.keys.maxkeys, 200 keys per uid; runc gives every
// sandbox a session keyring of its own) and RLIMIT_NPROC count per host
// uid: with a uid range per sandbox, each sandbox has its own count.
// inotify instances and watches are different: the kernel charges them in
// the sandbox's user namespace and in every namespace above it, where the
// sandbox counts as the namespace's owner, host root. Every sandbox on the
// node, and host root's own processes, share fs.inotify.max_user_instances
// (128 by default) and max_user_watches. RaiseInotifyLimits raises both to
// a size for the node; the memory of instances and watches is charged to
// each sandbox's memory cgroup, which bounds what one sandbox can take.

// Per sandbox, the node allows what the kernel allows one user by default
// (instances) and what a large editor or file watcher asks (watches).
const (
	InotifyInstancesPerSandbox = 128
	InotifyWatchesPerSandbox   = 65536
)

const (
	inotifyInstancesPath = "/proc/sys/fs/inotify/max_user_instances"
	inotifyWatchesPath   = "/proc/sys/fs/inotify/max_user_watches"
)

// InotifySandboxes is how many sandboxes the inotify limits are sized
// for: as many as the node's memory can hold at the smallest memory a
// sandbox may have, at least 1024.
func InotifySandboxes() int64 {
	var si unix.Sysinfo_t
	n := int64(1024)
	if err := unix.Sysinfo(&si); err == nil {
		if m := int64(si.Totalram) * int64(si.Unit) / (MinMemoryMiB << 20); m > n {
			n = m
		}
	}
	return n
}

// RaiseInotifyLimits raises fs.inotify.max_user_instances and
// max_user_watches to what sandboxes sandboxes need (see the constants),
// never lowering them, and logs what it set.
func RaiseInotifyLimits(sandboxes int64, log *slog.Logger) error {
	for _, l := range []struct {
		path string
		want int64
	}{
		{inotifyInstancesPath, sandboxes * InotifyInstancesPerSandbox},
		{inotifyWatchesPath, sandboxes * InotifyWatchesPerSandbox},
	} {
		want := min(l.want, 1<<31-1)
		b, err := os.ReadFile(l.path)
		if err != nil {
			return fmt.Errorf("read %s: %w", l.path, err)
		}
		cur, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			return fmt.Errorf("read %s: %w", l.path, err)
		}
		if cur >= want {
			continue
		}
		if err := os.WriteFile(l.path, []byte(strconv.FormatInt(want, 10)), 0o644); err != nil {
			return fmt.Errorf("raise %s from %d to %d: %w", l.path, cur, want, err)
		}
		log.Info("raised a kernel limit that all sandboxes share", "sysctl", strings.ReplaceAll(strings.TrimPrefix(l.path, "/proc/sys/"), "/", "."), "from", cur, "to", want)
	}
	return nil
}

// Process IDs: every thread on the host, in every sandbox, takes one from
// kernel.pid_max, which many kernels start at 32,768. An idle sandbox
// takes about nine (its agent's threads, and the journal and reserve
// threads of its disk's ext4), so the default stops a node at some 3,500
// idle sandboxes with a fork that fails with EAGAIN, whatever its memory.
// RaisePidMax raises it to PidMaxLimit, the kernel's own ceiling on 64-bit
// hosts and the value systemd sets at boot since version 243: the IDs are
// allocated as they are used, so a higher ceiling costs no memory, and
// kernel.threads-max (sized by the kernel from the host's memory) and each
// sandbox's pids cgroup still bound what is used.
const PidMaxLimit = 1 << 22

const pidMaxPath = "/proc/sys/kernel/pid_max"

// RaisePidMax raises kernel.pid_max to PidMaxLimit, never lowering it, and
// logs what it set. Where it cannot (a node in a container whose
// /proc/sys is read-only), it logs a warning with the limit the node keeps.
func RaisePidMax(log *slog.Logger) {
	raiseSysctl(pidMaxPath, PidMaxLimit, log)
}

// raiseSysctl raises the integer sysctl at path to want if it is lower,
// and says so; it only warns when it cannot.
func raiseSysctl(path string, want int64, log *slog.Logger) {
	name := strings.ReplaceAll(strings.TrimPrefix(path, "/proc/sys/"), "/", ".")
	cur, err := readSysctl(path)
	if err != nil {
		log.Warn("read a kernel limit", "sysctl", name, "err", err)
		return
	}
	if cur >= want {
		return
	}
	if err := os.WriteFile(path, []byte(strconv.FormatInt(want, 10)), 0o644); err != nil {
		log.Warn("could not raise a kernel limit that bounds how many sandboxes the node holds", "sysctl", name, "limit", cur, "want", want, "err", err)
		return
	}
	log.Info("raised a kernel limit that all sandboxes share", "sysctl", name, "from", cur, "to", want)
}

func readSysctl(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}
