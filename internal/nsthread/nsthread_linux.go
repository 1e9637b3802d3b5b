package nsthread

import (
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
)

// Run runs fn on a new thread inside the namespace open as descriptor ns
// (of /proc/PID/ns/…) and returns fn's error. nstype is the namespace's
// CLONE_NEW… flag, which setns checks against ns (0 accepts any). Run
// returns once fn has; the thread exits after, with its goroutine.
func Run(ns, nstype int, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		// Never unlocked: the thread exits with this goroutine instead of
		// going back to the scheduler inside the namespace.
		runtime.LockOSThread()
		if err := unix.Setns(ns, nstype); err != nil {
			errc <- fmt.Errorf("join namespace: %w", err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}
