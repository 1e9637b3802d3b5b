// Command probe tries, from inside a sandbox, what an attacker would do to
// the sandbox's agent (PID 1), and the same to a child of its own as a
// control; it prints one "what=result" line for each ("ok" or the error).
// The agentguard tests build it static and run it in a sandbox.
package main

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"

	"golang.org/x/sys/unix"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "child" {
		select {} // a process to probe as a control; killed by the parent
	}
	runtime.LockOSThread() // ptrace belongs to the thread that attached
	d, err := unix.PrctlRetInt(unix.PR_GET_DUMPABLE, 0, 0, 0, 0)
	fmt.Printf("self-dumpable=%d\n", d)
	if err != nil {
		fmt.Printf("self-dumpable-error=%v\n", err)
	}
	probe("agent", 1, false)

	child := exec.Command("/proc/self/exe", "child")
	if err := child.Start(); err != nil {
		fmt.Printf("child=%v\n", err)
		return
	}
	probe("child", child.Process.Pid, true)
	child.Process.Kill()
	child.Wait()
}

func report(what string, err error) {
	if err == nil {
		fmt.Printf("%s=ok\n", what)
	} else {
		fmt.Printf("%s=%v\n", what, err)
	}
}

// probe tries to read pid's environment and memory, take its descriptor 3
// and ptrace it.
func probe(name string, pid int, detach bool) {
	p := "/proc/" + strconv.Itoa(pid)
	_, err := os.ReadFile(p + "/environ")
	report(name+"-environ", err)
	f, err := os.Open(p + "/mem")
	if err == nil {
		f.Close()
	}
	report(name+"-mem", err)
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err == nil {
		var fd int
		fd, err = unix.PidfdGetfd(pidfd, 3, 0)
		if err == nil {
			unix.Close(fd)
		}
		unix.Close(pidfd)
	}
	report(name+"-pidfd-getfd-3", err)
	err = ptrace(unix.PTRACE_SEIZE, pid)
	report(name+"-ptrace-seize", err)
	if err == nil {
		ptrace(unix.PTRACE_INTERRUPT, pid)
		var ws unix.WaitStatus
		unix.Wait4(pid, &ws, unix.WALL, nil)
		ptrace(unix.PTRACE_DETACH, pid)
	}
	if !detach {
		// PTRACE_ATTACH stops the tracee: where it must fail, but should it
		// succeed, let it go on.
		err = ptrace(unix.PTRACE_ATTACH, pid)
		report(name+"-ptrace-attach", err)
		if err == nil {
			var ws unix.WaitStatus
			unix.Wait4(pid, &ws, unix.WALL, nil)
			ptrace(unix.PTRACE_DETACH, pid)
		}
	}
}

func ptrace(req, pid int) error {
	_, _, e := unix.Syscall6(unix.SYS_PTRACE, uintptr(req), uintptr(pid), 0, 0, 0, 0)
	if e != 0 {
		return e
	}
	return nil
}
