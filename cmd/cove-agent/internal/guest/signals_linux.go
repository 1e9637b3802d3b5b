package guest

import (
	"fmt"
	"os"
	"os/signal"
	"unsafe"

	"golang.org/x/sys/unix"
)

// defaultSignals makes every standard signal this process ignores (one it
// inherited as ignored from nohup, a service manager's IgnoreSIGPIPE, or a
// test run under either) caught instead, so that the commands it starts
// get their default action: Go keeps a signal that was ignored at start
// ignored in its children and resets a caught one to the default. A
// caught signal goes to a channel nobody reads, whose one slot fills and
// whose later signals the runtime drops, so for the agent itself it stays
// as good as ignored. What is ignored is the kernel's word (each signal's
// action, as SigIgn in /proc/self/status shows it), not the Go runtime's: the runtime's own record can
// say a signal is not ignored while the kernel still ignores it (after
// signal.Ignore, Notify and Reset, it puts back the SIG_IGN it found). It
// is called before every start; once nothing is ignored it does nothing.
func defaultSignals() {
	mask, err := ignoredMask()
	if err != nil {
		// The runtime's record, then.
		for s := unix.Signal(1); s < 32; s++ {
			if signal.Ignored(s) {
				mask |= 1 << (s - 1)
			}
		}
	}
	var ignored []os.Signal
	for s := unix.Signal(1); s < 32; s++ {
		if s == unix.SIGKILL || s == unix.SIGSTOP {
			continue
		}
		if mask&(1<<(s-1)) != 0 {
			ignored = append(ignored, s)
		}
	}
	if len(ignored) > 0 {
		signal.Notify(make(chan os.Signal, 1), ignored...)
	}
}

// ignoredMask is the kernel's set of signals this process ignores: bit
// n-1 for signal n. It asks the kernel for each signal's action
// (rt_sigaction without a new one), 31 cheap calls, where reading
// /proc/self/status made the kernel format the whole file at every
// command's start.
func ignoredMask() (uint64, error) {
	var mask uint64
	for s := unix.Signal(1); s < 32; s++ {
		if s == unix.SIGKILL || s == unix.SIGSTOP {
			continue
		}
		// The kernel's struct sigaction, whose first word is the handler;
		// 32 bytes hold it on every 64-bit architecture.
		var old [4]uint64
		if _, _, errno := unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(s), 0, uintptr(unsafe.Pointer(&old)), 8, 0, 0); errno != 0 {
			return 0, fmt.Errorf("rt_sigaction(%d): %w", s, errno)
		}
		if old[0] == sigIgn {
			mask |= 1 << (s - 1)
		}
	}
	return mask, nil
}

// sigIgn is SIG_IGN, the handler of an ignored signal.
const sigIgn = 1
