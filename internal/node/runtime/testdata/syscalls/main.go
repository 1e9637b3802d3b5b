// Command syscalls tries syscalls with arguments that fail harmlessly and
// prints "name: errno" for each, so that a test can tell a seccomp denial
// (EPERM) from the kernel's own answer. It is built by the runtime tests and
// run inside a sandbox.
package main

import (
	"errors"
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
)

func main() {
	for _, c := range []struct {
		name string
		nr   uintptr
		args [3]uintptr
	}{
		// Denied by the filter.
		{"setns", unix.SYS_SETNS, [3]uintptr{^uintptr(0), 0, 0}},           // else EBADF
		{"io_uring_setup", unix.SYS_IO_URING_SETUP, [3]uintptr{0, 0, 0}},   // else EINVAL or EFAULT
		{"perf_event_open", unix.SYS_PERF_EVENT_OPEN, [3]uintptr{0, 0, 0}}, // else EFAULT
		{"keyctl", unix.SYS_KEYCTL, [3]uintptr{^uintptr(0), 0, 0}},         // else EOPNOTSUPP
		{"open_tree", unix.SYS_OPEN_TREE, [3]uintptr{^uintptr(0), 0, 0}},   // else EBADF or EINVAL
		{"fsopen", unix.SYS_FSOPEN, [3]uintptr{0, 0, 0}},                   // else EFAULT
		{"bpf", unix.SYS_BPF, [3]uintptr{^uintptr(0), 0, 0}},               // else EINVAL
		// Allowed.
		{"unshare", unix.SYS_UNSHARE, [3]uintptr{0, 0, 0}},         // 0
		{"getpid", unix.SYS_GETPID, [3]uintptr{0, 0, 0}},           // ok
		{"ptrace", unix.SYS_PTRACE, [3]uintptr{^uintptr(0), 0, 0}}, // else EIO/ESRCH
	} {
		_, _, e := syscall.RawSyscall(c.nr, c.args[0], c.args[1], c.args[2])
		fmt.Printf("%s: %s\n", c.name, name(e))
	}
}

func name(e syscall.Errno) string {
	switch {
	case e == 0:
		return "ok"
	case errors.Is(e, syscall.EPERM):
		return "EPERM"
	default:
		return unix.ErrnoName(e)
	}
}
