package guest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"

	"golang.org/x/sys/unix"
)

// startReaper makes the process the reaper of its descendants (it is one
// already as PID 1; otherwise it becomes a child subreaper) and starts the
// goroutine that reaps every child on SIGCHLD. Close stops it.
func (s *Server) startReaper() error {
	if os.Getpid() != 1 {
		if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
			return fmt.Errorf("become child subreaper: %w", err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.stopReaper = cancel
	// Subscribe before any command starts, so that no SIGCHLD is missed.
	sigc := make(chan os.Signal, 1)
	signal.Notify(sigc, unix.SIGCHLD)
	s.reaperWG.Go(func() {
		defer signal.Stop(sigc)
		for {
			s.reapAll()
			select {
			case <-ctx.Done():
				return
			case <-sigc:
			}
		}
	})
	return nil
}

// reapAll collects the status of every child that has exited, orphans
// included, and hands each to the command whose process it is.
func (s *Server) reapAll() {
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || pid <= 0 { // ECHILD: no children; 0: none exited
			return
		}
		// start holds procMu from fork to registration, so the command is
		// here by the time we get the lock.
		s.procMu.Lock()
		c := s.procs[pid]
		delete(s.procs, pid)
		s.procMu.Unlock()
		if c == nil {
			s.log.Debug("reaped orphan", "pid", pid, "status", int(ws))
			continue
		}
		c.setExited(ws)
	}
}
