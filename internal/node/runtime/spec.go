package runtime

import (
	"math"
	"strconv"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/cove-dev/cove/internal/node/image"
)

// cpuPeriod is the CFS period of every sandbox, in microseconds.
const cpuPeriod = 100000

// defaultCaps is Docker's default capability set without CAP_NET_RAW:
// with it, sandbox root could forge packets (any source address, any
// protocol) and open AF_PACKET sockets. ping loses it too, and has nothing
// to reach: the fence passes only DNS and TCP to the gateway.
var defaultCaps = []string{
	"CAP_CHOWN",
	"CAP_DAC_OVERRIDE",
	"CAP_FSETID",
	"CAP_FOWNER",
	"CAP_MKNOD",
	"CAP_SETGID",
	"CAP_SETUID",
	"CAP_SETFCAP",
	"CAP_SETPCAP",
	"CAP_NET_BIND_SERVICE",
	"CAP_SYS_CHROOT",
	"CAP_KILL",
	"CAP_AUDIT_WRITE",
}

// maskedPaths and readonlyPaths are runc's defaults (`runc spec`).
var (
	maskedPaths = []string{
		"/proc/acpi",
		"/proc/asound",
		"/proc/kcore",
		"/proc/keys",
		"/proc/latency_stats",
		"/proc/timer_list",
		"/proc/timer_stats",
		"/proc/sched_debug",
		"/sys/firmware",
		"/proc/scsi",
	}
	readonlyPaths = []string{
		"/proc/bus",
		"/proc/fs",
		"/proc/irq",
		"/proc/sys",
		"/proc/sysrq-trigger",
	}
)

// Nofile is the RLIMIT_NOFILE of a sandbox's processes.
const Nofile = 1048576

// host is what the spec of a sandbox takes from the runtime and the host.
type host struct {
	ids         image.IDMap
	agentPath   string
	cgroupsPath string
	nofile      uint64
	// swapLimit says the kernel accounts swap (memory.memsw.* in cgroup
	// v1): then memory+swap is limited to the memory limit. Without it
	// there is no such knob, and runc would fail to write it.
	swapLimit bool
}

// agentProcs is how many threads the agent runs Go code on: its sandbox's
// CPUs, rounded up. Go's own default takes at least 2 under a CPU quota,
// and for a sandbox of one CPU every hand-off between the agent's
// goroutines (a command's start, its output, its exit) then wakes another
// thread. A sandbox's CPUs do not change while it runs. Commands do not
// inherit the agent's environment. On one P the runtime hands work to
// another thread whenever a goroutine blocks; the agent keeps spare ones
// for when the sandbox's pids limit is full (cmd/cove-agent: spares).
func agentProcs(cpus float64) int {
	return max(1, int(math.Ceil(cpus)))
}

// ociSpec builds the runc config of a sandbox whose bundle holds rootfs.
func ociSpec(s Spec, h host) *specs.Spec {
	ids, nofile := h.ids, h.nofile
	memory := s.MemoryMiB << 20
	mem := &specs.LinuxMemory{Limit: &memory}
	if h.swapLimit {
		mem.Swap = &memory
	}
	quota := int64(math.Round(s.CPUs * cpuPeriod))
	period := uint64(cpuPeriod)
	pids := s.Pids
	caps := append([]string(nil), defaultCaps...)
	agentArgs := []string{image.AgentMountPoint, "--workdir", s.Workdir}
	if c := s.Image.Config; c != nil {
		// An imported image's own user owns the work directory.
		agentArgs = append(agentArgs, "--uid", strconv.Itoa(c.UID), "--gid", strconv.Itoa(c.GID))
	}
	spec := &specs.Spec{
		Version: specs.Version,
		Process: &specs.Process{
			User: specs.User{UID: 0, GID: 0},
			Args: agentArgs,
			Env: []string{
				"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
				"HOME=/root",
				"TERM=xterm",
				"LANG=C.UTF-8",
				"GOMAXPROCS=" + strconv.Itoa(agentProcs(s.CPUs)),
			},
			Cwd: "/",
			Capabilities: &specs.LinuxCapabilities{
				Bounding:  caps,
				Effective: caps,
				Permitted: caps,
			},
			Rlimits: []specs.POSIXRlimit{
				{Type: "RLIMIT_NOFILE", Hard: nofile, Soft: nofile},
			},
			NoNewPrivileges: !s.SetID,
		},
		Root:     &specs.Root{Path: "rootfs", Readonly: false},
		Hostname: s.Hostname,
		Mounts: []specs.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc"},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs",
				Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
			{Destination: "/dev/pts", Type: "devpts", Source: "devpts",
				Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"}},
			{Destination: "/dev/shm", Type: "tmpfs", Source: "shm",
				Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
			{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue",
				Options: []string{"nosuid", "noexec", "nodev"}},
			{Destination: "/sys", Type: "sysfs", Source: "sysfs",
				Options: []string{"nosuid", "noexec", "nodev", "ro"}},
			{Destination: "/sys/fs/cgroup", Type: "cgroup", Source: "cgroup",
				Options: []string{"nosuid", "noexec", "nodev", "relatime", "ro"}},
			{Destination: image.AgentMountPoint, Type: "bind", Source: h.agentPath,
				Options: []string{"bind", "ro", "nosuid", "nodev"}},
		},
		Linux: &specs.Linux{
			UIDMappings: []specs.LinuxIDMapping{{ContainerID: 0, HostID: ids.HostID, Size: ids.Size}},
			GIDMappings: []specs.LinuxIDMapping{{ContainerID: 0, HostID: ids.HostID, Size: ids.Size}},
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.PIDNamespace},
				{Type: specs.NetworkNamespace},
				{Type: specs.IPCNamespace},
				{Type: specs.UTSNamespace},
				{Type: specs.MountNamespace},
				{Type: specs.UserNamespace},
				{Type: specs.CgroupNamespace},
			},
			CgroupsPath: h.cgroupsPath,
			Resources: &specs.LinuxResources{
				Devices: []specs.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}},
				Memory:  mem,
				CPU:     &specs.LinuxCPU{Quota: &quota, Period: &period},
				Pids:    &specs.LinuxPids{Limit: &pids},
			},
			Seccomp:       seccomp(),
			MaskedPaths:   append([]string(nil), maskedPaths...),
			ReadonlyPaths: append([]string(nil), readonlyPaths...),
		},
	}
	if s.ResolvConf != "" {
		spec.Mounts = append(spec.Mounts, specs.Mount{Destination: "/etc/resolv.conf", Type: "bind",
			Source: s.ResolvConf, Options: []string{"bind", "ro", "nosuid", "nodev", "noexec"}})
	}
	if s.CABundle != "" {
		spec.Mounts = append(spec.Mounts, specs.Mount{Destination: CABundlePath, Type: "bind",
			Source: s.CABundle, Options: []string{"bind", "ro", "nosuid", "nodev", "noexec"}})
	}
	return spec
}
