package guest

import (
	"errors"
	"os"
	"os/signal"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// defaultSignals makes every standard signal this process ignores (one it
// inherited as ignored from nohup, a service manager's IgnoreSIGPIPE, or a
// test run under either) caught instead, so that the commands it starts
// get their default action: Go keeps a signal that was ignored at start
// ignored in its children and resets a caught one to the default. A
// caught signal goes to a channel nobody reads, whose one slot fills and
// whose later signals the runtime drops, so for the agent itself it stays
// as good as ignored. What is ignored is the kernel's word (SigIgn in
// /proc/self/status), not the Go runtime's: the runtime's own record can
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
// n-1 for signal n.
func ignoredMask() (uint64, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "SigIgn:"); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		}
	}
	return 0, errors.New("no SigIgn in /proc/self/status")
}
