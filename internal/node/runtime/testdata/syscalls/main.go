// Command syscalls tries system calls and prints "case: result" for each
// (with "entry" as its argument, only the calls through other entry points
// than x86_64's),
// where result is "ok", an errno name (EPERM, ENOSYS, ...) or, for a call
// made in a child process, the signal that killed it (SIGSYS). It is built
// by the runtime tests and run inside a sandbox, which compares each result
// with what the seccomp filter and the capabilities must give.
//
// Where the kernel itself would answer EPERM, the arguments are chosen so
// that it answers something else (EINVAL, EFAULT, EBADF, ...): then EPERM
// can only come from the filter. Calls that would change this process
// (a new namespace, a 32-bit entry point that may kill it) run in a forked
// child, which exits with the errno as its status.
package main

import (
	"fmt"
	"os"
	"runtime"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// int80 makes a 32-bit system call through int 0x80 (int80_amd64.s).
func int80(nr, a1, a2, a3 uintptr) uintptr

// call is one system call, made through the x86_64 entry point unless
// int80 is set.
type call struct {
	nr      uintptr
	a       [6]uintptr
	int80   bool
	inChild bool
	entry   bool // another entry point than x86_64's
}

// cloneArgs is struct clone_args of linux/sched.h, as far as
// CLONE_ARGS_SIZE_VER0.
type cloneArgs struct {
	flags, pidfd, childTID, parentTID, exitSignal, stack, stackSize, tls uint64
}

func main() {
	// Nothing else runs on this thread, so a goroutine that locks a
	// thread of its own runs on another one.
	runtime.LockOSThread()
	// sock is socket(family, type, 0).
	sock := func(family, typ uintptr) call {
		return call{nr: unix.SYS_SOCKET, a: [6]uintptr{family, typ, 0}}
	}
	// badType is a socket type the kernel refuses with EINVAL before it
	// looks at the family: only the filter answers anything else.
	const badType = 15
	clone := func(flags uintptr) call {
		return call{nr: unix.SYS_CLONE, a: [6]uintptr{flags}}
	}
	clone3 := func(flags uint64) call {
		args := &cloneArgs{flags: flags, exitSignal: uint64(unix.SIGCHLD)}
		return call{nr: unix.SYS_CLONE3, a: [6]uintptr{uintptr(unsafe.Pointer(args)), unsafe.Sizeof(*args)}}
	}
	const notSighand = unix.CLONE_THREAD // without CLONE_SIGHAND: EINVAL from the kernel
	bad := ^uintptr(0)
	cases := []struct {
		name string
		c    call
	}{
		// Namespaces.
		{"unshare(0)", call{nr: unix.SYS_UNSHARE}},
		{"unshare(NEWUSER|NEWNET)", call{nr: unix.SYS_UNSHARE, a: [6]uintptr{unix.CLONE_NEWUSER | unix.CLONE_NEWNET}, inChild: true}},
		{"setns", call{nr: unix.SYS_SETNS, a: [6]uintptr{bad}}},
		{"clone(NEWUSER|NEWNET)", clone(unix.CLONE_NEWUSER | unix.CLONE_NEWNET | uintptr(unix.SIGCHLD))},
		{"clone(NEWUSER|THREAD)", clone(unix.CLONE_NEWUSER | notSighand)},
		{"clone(NEWNS|THREAD)", clone(unix.CLONE_NEWNS | notSighand)},
		{"clone(NEWCGROUP|THREAD)", clone(unix.CLONE_NEWCGROUP | notSighand)},
		{"clone(NEWUTS|THREAD)", clone(unix.CLONE_NEWUTS | notSighand)},
		{"clone(NEWIPC|THREAD)", clone(unix.CLONE_NEWIPC | notSighand)},
		{"clone(NEWPID|THREAD)", clone(unix.CLONE_NEWPID | notSighand)},
		{"clone(NEWNET|THREAD)", clone(unix.CLONE_NEWNET | notSighand)},
		{"clone3(NEWUSER)", clone3(unix.CLONE_NEWUSER)},
		{"clone3(0)", clone3(0)},
		// Processes without namespaces.
		{"clone(THREAD)", clone(notSighand)},
		{"clone(SIGCHLD)", clone(uintptr(unix.SIGCHLD))},
		{"fork", call{nr: unix.SYS_FORK}},
		{"thread", call{}}, // see below
		{"ptrace(TRACEME)", call{nr: unix.SYS_PTRACE, a: [6]uintptr{unix.PTRACE_TRACEME}, inChild: true}},
		{"personality(0xffffffff)", call{nr: unix.SYS_PERSONALITY, a: [6]uintptr{0xffffffff}}},
		{"personality(0)", call{nr: unix.SYS_PERSONALITY, a: [6]uintptr{0}}},
		{"personality(ADDR_NO_RANDOMIZE)", call{nr: unix.SYS_PERSONALITY, a: [6]uintptr{0x0040000}, inChild: true}},
		{"personality(READ_IMPLIES_EXEC)", call{nr: unix.SYS_PERSONALITY, a: [6]uintptr{0x0400000}, inChild: true}},
		// Sockets.
		{"socket(AF_INET)", sock(unix.AF_INET, unix.SOCK_STREAM)},
		{"socket(AF_INET6)", sock(unix.AF_INET6, unix.SOCK_DGRAM)},
		{"socket(AF_UNIX)", sock(unix.AF_UNIX, unix.SOCK_STREAM)},
		{"socket(AF_NETLINK)", sock(unix.AF_NETLINK, unix.SOCK_RAW)},
		{"socketpair(AF_UNIX)", call{nr: unix.SYS_SOCKETPAIR, a: [6]uintptr{unix.AF_UNIX, unix.SOCK_STREAM, 0, uintptr(unsafe.Pointer(new([2]int32)))}}},
		{"socket(AF_INET, bad type)", sock(unix.AF_INET, badType)},
		{"socket(AF_INET, SOCK_RAW)", call{nr: unix.SYS_SOCKET, a: [6]uintptr{unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_UDP}}},
		{"socket(AF_VSOCK)", sock(unix.AF_VSOCK, unix.SOCK_STREAM)},
		{"socket(AF_VSOCK, bad type)", sock(unix.AF_VSOCK, badType)},
		{"socket(AF_ALG, bad type)", sock(unix.AF_ALG, badType)},
		{"socket(AF_PACKET)", sock(unix.AF_PACKET, unix.SOCK_RAW)},
		{"socket(AF_PACKET, bad type)", sock(unix.AF_PACKET, badType)},
		{"socketpair(AF_TIPC)", call{nr: unix.SYS_SOCKETPAIR, a: [6]uintptr{unix.AF_TIPC, badType, 0, 0}}},
		// Keys, bpf, perf, userfaultfd, handles, kexec, mounts, io_uring.
		{"keyctl", call{nr: unix.SYS_KEYCTL, a: [6]uintptr{bad}}},             // else EOPNOTSUPP
		{"add_key", call{nr: unix.SYS_ADD_KEY}},                               // else EFAULT
		{"request_key", call{nr: unix.SYS_REQUEST_KEY}},                       // else EFAULT
		{"bpf", call{nr: unix.SYS_BPF, a: [6]uintptr{bad}}},                   // else EINVAL
		{"perf_event_open", call{nr: unix.SYS_PERF_EVENT_OPEN}},               // else EFAULT
		{"userfaultfd", call{nr: unix.SYS_USERFAULTFD, a: [6]uintptr{1 | 2}}}, // else EINVAL
		{"open_by_handle_at", call{nr: unix.SYS_OPEN_BY_HANDLE_AT, a: [6]uintptr{bad}}},
		{"name_to_handle_at", call{nr: unix.SYS_NAME_TO_HANDLE_AT, a: [6]uintptr{bad}}},
		{"kexec_load", call{nr: unix.SYS_KEXEC_LOAD, a: [6]uintptr{0, 0, 0, bad}}},
		{"kexec_file_load", call{nr: unix.SYS_KEXEC_FILE_LOAD, a: [6]uintptr{bad, bad, 0, 0, bad}}},
		{"mount", call{nr: unix.SYS_MOUNT}},                                       // else EFAULT
		{"umount2", call{nr: unix.SYS_UMOUNT2}},                                   // else EFAULT
		{"open_tree", call{nr: unix.SYS_OPEN_TREE, a: [6]uintptr{bad}}},           // else EBADF or EINVAL
		{"io_uring_setup", call{nr: unix.SYS_IO_URING_SETUP}},                     // else EINVAL or EFAULT
		{"io_uring_enter", call{nr: unix.SYS_IO_URING_ENTER, a: [6]uintptr{bad}}}, // else EBADF
		{"io_uring_register", call{nr: unix.SYS_IO_URING_REGISTER, a: [6]uintptr{bad}}},
		{"init_module", call{nr: unix.SYS_INIT_MODULE}},
		{"pidfd_getfd", call{nr: unix.SYS_PIDFD_GETFD, a: [6]uintptr{bad}}}, // else EBADF
		{"modify_ldt", call{nr: unix.SYS_MODIFY_LDT, a: [6]uintptr{bad}}},   // else ENOSYS or EINVAL
		// Entry points other than x86_64's (the only cases with "entry" as
		// the first argument): getpid and unshare(CLONE_NEWUSER) through
		// int 0x80 (i386 numbers 20 and 310), and getpid as an x32 call.
		{"i386 getpid", call{nr: 20, int80: true, inChild: true, entry: true}},
		{"i386 unshare(NEWUSER)", call{nr: 310, a: [6]uintptr{unix.CLONE_NEWUSER}, int80: true, inChild: true, entry: true}},
		{"x32 getpid", call{nr: 0x40000000 | unix.SYS_GETPID, inChild: true, entry: true}},
		// Everyday calls.
		{"getpid", call{nr: unix.SYS_GETPID}},
		{"uname", call{nr: unix.SYS_UNAME, a: [6]uintptr{uintptr(unsafe.Pointer(new(unix.Utsname)))}}},
	}
	entryOnly := len(os.Args) > 1 && os.Args[1] == "entry"
	for _, tc := range cases {
		if entryOnly && !tc.c.entry {
			continue
		}
		var res string
		switch {
		case tc.name == "thread":
			res = newThread()
		case tc.c.inChild:
			res = inChild(&tc.c)
		default:
			r, e := rawCall(&tc.c)
			res = result(e)
			switch {
			case e != 0:
			case tc.c.nr == unix.SYS_CLONE || tc.c.nr == unix.SYS_CLONE3 || tc.c.nr == unix.SYS_FORK:
				res = reap(int(r))
			case tc.c.nr == unix.SYS_SOCKET || tc.c.nr == unix.SYS_USERFAULTFD:
				unix.Close(int(r))
			}
		}
		fmt.Printf("%s: %s\n", tc.name, res)
	}
}

// rawCall makes c. When c is a clone or fork that goes through, the child
// exits at once: it runs nothing of Go but this function, which needs no
// scheduler and no stack growth.
//
//go:nosplit
//go:norace
func rawCall(c *call) (uintptr, syscall.Errno) {
	r, _, e := syscall.RawSyscall6(c.nr, c.a[0], c.a[1], c.a[2], c.a[3], c.a[4], c.a[5])
	if e == 0 && r == 0 && (c.nr == unix.SYS_CLONE || c.nr == unix.SYS_CLONE3 || c.nr == unix.SYS_FORK) {
		syscall.RawSyscall(unix.SYS_EXIT_GROUP, 0, 0, 0)
	}
	return r, e
}

// inChild makes c in a forked child, which exits with the errno, and
// reports how the child ended.
func inChild(c *call) string {
	pid, e := forkCall(c)
	if e != 0 {
		return "fork: " + result(e)
	}
	return reap(int(pid))
}

// forkCall forks; the child makes c and exits.
//
//go:nosplit
//go:norace
func forkCall(c *call) (uintptr, syscall.Errno) {
	pid, _, e := syscall.RawSyscall(unix.SYS_FORK, 0, 0, 0)
	if e == 0 && pid == 0 {
		childCall(c)
	}
	return pid, e
}

// childCall runs in the child of a fork, which has only this thread: it
// must not allocate, grow its stack or wait for the scheduler.
//
//go:nosplit
//go:norace
func childCall(c *call) {
	var e uintptr
	switch {
	case c.int80:
		// Where the CPU or the kernel has no such entry point, the call
		// faults: let SIGSEGV kill the child, without Go's crash report.
		var dfl [4]uint64 // struct sigaction with SIG_DFL
		syscall.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(unix.SIGSEGV), uintptr(unsafe.Pointer(&dfl)), 0, 8, 0, 0)
		r := int80(c.nr, c.a[0], c.a[1], c.a[2])
		if int32(r) < 0 && int32(r) > -4096 {
			e = uintptr(-int32(r))
		}
	default:
		_, _, errno := syscall.RawSyscall6(c.nr, c.a[0], c.a[1], c.a[2], c.a[3], c.a[4], c.a[5])
		e = uintptr(errno)
	}
	syscall.RawSyscall(unix.SYS_EXIT_GROUP, e, 0, 0)
}

// reap waits for child pid and says how it ended: "ok" for status 0, the
// errno its status stands for, or the signal that killed it.
func reap(pid int) string {
	var ws unix.WaitStatus
	for {
		_, err := unix.Wait4(pid, &ws, 0, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return "wait: " + err.Error()
		}
		break
	}
	switch {
	case ws.Signaled():
		return unix.SignalName(ws.Signal())
	case ws.Exited():
		return result(syscall.Errno(ws.ExitStatus()))
	}
	return fmt.Sprintf("status %#x", ws)
}

// newThread starts an OS thread and reports whether it ran as a thread of
// this process.
func newThread() string {
	tid := make(chan int)
	go func() {
		runtime.LockOSThread() // this thread ends with the goroutine
		tid <- unix.Gettid()
	}()
	if t := <-tid; t != unix.Gettid() {
		return "ok"
	}
	return "same thread"
}

func result(e syscall.Errno) string {
	if e == 0 {
		return "ok"
	}
	if n := unix.ErrnoName(e); n != "" {
		return n
	}
	return fmt.Sprintf("errno %d", int(e))
}
