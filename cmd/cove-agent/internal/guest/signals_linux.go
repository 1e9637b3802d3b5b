package guest

import (
	"os"
	"os/signal"

	"golang.org/x/sys/unix"
)

// defaultSignals makes every standard signal this process ignores (one it
// inherited as ignored from nohup, a service manager's IgnoreSIGPIPE, or a
// test run under either) caught instead, so that the commands it starts
// get their default action: Go keeps a signal that was ignored at start
// ignored in its children and resets a caught one to the default. A
// caught signal goes to a channel nobody reads, whose one slot fills and
// whose later signals the runtime drops, so for the agent itself it stays
// as good as ignored. It is called before every start; once nothing is
// ignored it does nothing.
func defaultSignals() {
	var ignored []os.Signal
	for s := unix.Signal(1); s < 32; s++ {
		if s == unix.SIGKILL || s == unix.SIGSTOP {
			continue
		}
		if signal.Ignored(s) {
			ignored = append(ignored, s)
		}
	}
	if len(ignored) > 0 {
		signal.Notify(make(chan os.Signal, 1), ignored...)
	}
}
