package runtime

import (
	"slices"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// The seccomp filter of a sandbox is an allow-list for x86_64 only, at
// least as strict as Docker's default profile for Docker's default
// capabilities (github.com/moby/profiles, seccomp/default.json), which is
// where its choices come from; the table is our own.
//
//   - Only the native entry point: the filter names x86_64 alone, so a
//     32-bit call (int 0x80) or an x32 call never reaches the kernel's
//     system call tables, whatever they hold.
//   - Anything not listed fails with EPERM. runc also answers ENOSYS for
//     any call newer than the newest one the filter names, so new kernel
//     calls stay closed and libc sees them as missing.
//   - No namespaces: unshare and setns are not listed, clone is allowed
//     only without CLONE_NEW* flags, and clone3 (whose flags sit in memory
//     a filter cannot read) answers ENOSYS, so that glibc falls back to
//     clone. Nested user namespaces are the door to most container-escape
//     kernel bugs.
//   - Sockets only of the families a developer machine uses: unix, IPv4,
//     IPv6 and netlink. Not vsock (not per namespace), AF_ALG or AF_PACKET,
//     nor the dozens of rarely used protocol families.
//   - personality only with the values Docker allows (none of them turns
//     address space randomization off).
//   - Not listed, beyond what Docker leaves out for these capabilities:
//     name_to_handle_at, modify_ldt, remap_file_pages, memfd_secret,
//     fanotify_mark, process_mrelease, and the calls no kernel implements
//     any more.
//
// ptrace and process_vm_readv/writev are allowed, as Docker does on
// kernels from 4.8 on (seccomp is checked again after a tracer changes a
// call), so debuggers and strace work on a sandbox's own processes; pidfd_getfd,
// kcmp and process_madvise, which Docker ties to CAP_SYS_PTRACE, are not.

// allowedSyscalls may be called with any arguments.
var allowedSyscalls = []string{
	// Files, directories and descriptors.
	"access", "cachestat", "chdir", "chmod", "chown", "chroot", "close", "close_range",
	"copy_file_range", "creat", "dup", "dup2", "dup3", "faccessat", "faccessat2",
	"fadvise64", "fallocate", "fchdir", "fchmod", "fchmodat", "fchmodat2", "fchown",
	"fchownat", "fcntl", "fdatasync", "flock", "fstat", "fstatfs", "fsync",
	"ftruncate", "futimesat", "getcwd", "getdents", "getdents64", "lchown", "link",
	"linkat", "lseek", "mkdir", "mkdirat", "mknod", "mknodat", "newfstatat", "open",
	"openat", "openat2", "pread64", "preadv", "preadv2", "pwrite64", "pwritev",
	"pwritev2", "read", "readahead", "readlink", "readlinkat", "readv", "rename",
	"renameat", "renameat2", "rmdir", "sendfile", "splice", "stat", "statfs", "statx",
	"symlink", "symlinkat", "sync", "sync_file_range", "syncfs", "tee", "truncate",
	"umask", "unlink", "unlinkat", "utime", "utimensat", "utimes", "vmsplice", "write",
	"writev",
	// Extended attributes.
	"fgetxattr", "flistxattr", "fremovexattr", "fsetxattr", "getxattr", "getxattrat",
	"lgetxattr", "listxattr", "listxattrat", "llistxattr", "lremovexattr",
	"lsetxattr", "removexattr", "removexattrat", "setxattr", "setxattrat",
	// Reading the mount table (listmount and statmount only describe it).
	"listmount", "statmount",
	// Waiting for events.
	"epoll_create", "epoll_create1", "epoll_ctl", "epoll_pwait", "epoll_pwait2",
	"epoll_wait", "eventfd", "eventfd2", "inotify_add_watch", "inotify_init",
	"inotify_init1", "inotify_rm_watch", "poll", "ppoll", "pselect6", "select",
	"signalfd", "signalfd4", "timerfd_create", "timerfd_gettime", "timerfd_settime",
	// Asynchronous I/O, the old interface (io_uring is not listed).
	"io_cancel", "io_destroy", "io_getevents", "io_pgetevents", "io_setup", "io_submit",
	// Memory.
	"brk", "madvise", "map_shadow_stack", "membarrier", "memfd_create", "mincore",
	"mlock", "mlock2", "mlockall", "mmap", "mprotect", "mremap", "mseal", "msync",
	"munlock", "munlockall", "munmap", "pkey_alloc", "pkey_free", "pkey_mprotect",
	// Processes and threads (clone and personality are below, with conditions).
	"arch_prctl", "execve", "execveat", "exit", "exit_group", "fork", "get_robust_list",
	"getcpu", "getpgid", "getpgrp", "getpid", "getppid", "getpriority", "getrlimit",
	"getrusage", "getsid", "gettid", "ioprio_get", "ioprio_set", "kill",
	"pidfd_open", "pidfd_send_signal", "prctl", "prlimit64", "process_vm_readv",
	"process_vm_writev", "ptrace", "restart_syscall", "rseq", "sched_get_priority_max",
	"sched_get_priority_min", "sched_getaffinity", "sched_getattr", "sched_getparam",
	"sched_getscheduler", "sched_rr_get_interval", "sched_setaffinity",
	"sched_setattr", "sched_setparam", "sched_setscheduler", "sched_yield",
	"set_robust_list", "set_tid_address", "setpgid", "setpriority", "setrlimit",
	"setsid", "sysinfo", "tgkill", "times", "tkill", "uname", "uretprobe", "vfork",
	"wait4", "waitid",
	// Confining oneself further.
	"landlock_add_rule", "landlock_create_ruleset", "landlock_restrict_self", "seccomp",
	// Users and capabilities.
	"capget", "capset", "getegid", "geteuid", "getgid", "getgroups", "getresgid",
	"getresuid", "getuid", "setfsgid", "setfsuid", "setgid", "setgroups", "setregid",
	"setresgid", "setresuid", "setreuid", "setuid",
	// Signals and timers.
	"alarm", "getitimer", "pause", "rt_sigaction", "rt_sigpending", "rt_sigprocmask",
	"rt_sigqueueinfo", "rt_sigreturn", "rt_sigsuspend", "rt_sigtimedwait",
	"rt_tgsigqueueinfo", "setitimer", "sigaltstack", "timer_create", "timer_delete",
	"timer_getoverrun", "timer_gettime", "timer_settime",
	// Clocks (adjtimex and clock_adjtime only read without CAP_SYS_TIME).
	"adjtimex", "clock_adjtime", "clock_getres", "clock_gettime", "clock_nanosleep",
	"gettimeofday", "nanosleep", "time",
	// Futexes.
	"futex", "futex_requeue", "futex_wait", "futex_waitv", "futex_wake",
	// Sockets (socket and socketpair are below, with conditions).
	"accept", "accept4", "bind", "connect", "getpeername", "getsockname",
	"getsockopt", "listen", "recvfrom", "recvmmsg", "recvmsg", "sendmmsg", "sendmsg",
	"sendto", "setsockopt", "shutdown",
	// Pipes and System V and POSIX IPC (the sandbox has its own IPC namespace).
	"mq_getsetattr", "mq_notify", "mq_open", "mq_timedreceive", "mq_timedsend",
	"mq_unlink", "msgctl", "msgget", "msgrcv", "msgsnd", "pipe", "pipe2", "semctl",
	"semget", "semop", "semtimedop", "shmat", "shmctl", "shmdt", "shmget",
	// Terminals and devices (the device cgroup allows none), and randomness.
	"getrandom", "ioctl",
}

// Linux constants for the argument rules, from the kernel's uapi headers.
const (
	afUnix    = 1
	afInet    = 2
	afInet6   = 10
	afNetlink = 16

	// cloneNamespaces is every CLONE_NEW* flag clone(2) takes:
	// CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC,
	// CLONE_NEWUSER, CLONE_NEWPID and CLONE_NEWNET. (CLONE_NEWTIME shares
	// its bit with the exit signal in clone(2); it works only through
	// clone3 and unshare, which are closed.)
	cloneNamespaces = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 |
		0x10000000 | 0x20000000 | 0x40000000

	errnoPerm  = 1  // EPERM
	errnoNoSys = 38 // ENOSYS
)

// socketFamilies are the address families socket(2) may create.
var socketFamilies = []uint64{afUnix, afInet, afInet6, afNetlink}

// personalities are the values personality(2) may be called with:
// PER_LINUX, PER_LINUX32, UNAME26, UNAME26|PER_LINUX32, and 0xffffffff,
// which asks for the current one and changes nothing.
var personalities = []uint64{0, 0x0008, 0x20000, 0x20008, 0xffffffff}

// seccomp is the filter of every sandbox.
func seccomp() *specs.LinuxSeccomp {
	eperm, enosys := uint(errnoPerm), uint(errnoNoSys)
	rules := []specs.LinuxSyscall{{Names: slices.Clone(allowedSyscalls), Action: specs.ActAllow}}
	// One rule per allowed value: the rules of a call are alternatives,
	// the conditions inside one rule all have to hold.
	only := func(name string, index uint, values []uint64) {
		for _, v := range values {
			rules = append(rules, specs.LinuxSyscall{
				Names:  []string{name},
				Action: specs.ActAllow,
				Args:   []specs.LinuxSeccompArg{{Index: index, Value: v, Op: specs.OpEqualTo}},
			})
		}
	}
	only("socket", 0, socketFamilies)
	only("socketpair", 0, []uint64{afUnix})
	only("personality", 0, personalities)
	rules = append(rules,
		// flags & cloneNamespaces == 0.
		specs.LinuxSyscall{
			Names:  []string{"clone"},
			Action: specs.ActAllow,
			Args:   []specs.LinuxSeccompArg{{Index: 0, Value: cloneNamespaces, ValueTwo: 0, Op: specs.OpMaskedEqual}},
		},
		specs.LinuxSyscall{Names: []string{"clone3"}, Action: specs.ActErrno, ErrnoRet: &enosys},
	)
	return &specs.LinuxSeccomp{
		DefaultAction:   specs.ActErrno,
		DefaultErrnoRet: &eperm,
		Architectures:   []specs.Arch{specs.ArchX86_64},
		Syscalls:        rules,
	}
}
