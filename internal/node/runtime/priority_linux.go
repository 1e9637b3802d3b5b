package runtime

import (
	"fmt"
	"os"
	"os/exec"
	goruntime "runtime"
	"strconv"

	"golang.org/x/sys/unix"
)

// backgroundNice is the CPU priority a background start runs at: the
// lowest, so that it takes only CPU that nothing else wants.
const backgroundNice = 19

// startNiced starts cmd at backgroundNice. A Linux thread's priority is
// its own, and a process inherits the one of the thread that forks it:
// the fork happens on a thread given that priority for the moment, which
// gets the normal one back after. The thread is never handed back to the
// Go scheduler either (a goroutine that ends locked to its thread takes
// the thread with it), so nothing else of this process ever runs at the
// low priority, even if giving it back failed.
func startNiced(cmd *exec.Cmd) error {
	errc := make(chan error, 1)
	go func() {
		goruntime.LockOSThread() // never unlocked: see above
		tid := unix.Gettid()
		if err := unix.Setpriority(unix.PRIO_PROCESS, tid, backgroundNice); err != nil {
			errc <- fmt.Errorf("lower the priority of a background start: %w", err)
			return
		}
		err := cmd.Start()
		unix.Setpriority(unix.PRIO_PROCESS, tid, 0)
		errc <- err
	}()
	return <-errc
}

// normalPriority gives every thread of every process in the sandbox's
// cgroup the normal CPU priority (nice 0), after a background start. It
// goes over them until a pass finds no thread it had not seen: a thread
// made meanwhile by one it had not reached yet inherited the low one.
func (r *Runtime) normalPriority(id string) error {
	dirs, err := cgroupDirs(r.cgroupPath(id))
	if err != nil {
		return err
	}
	done := map[int]bool{}
	for range 10 {
		fresh := 0
		for _, dir := range dirs {
			pids, err := cgroupPids(dir)
			if err != nil {
				continue // a hierarchy without the sandbox's processes
			}
			for _, pid := range pids {
				tasks, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
				if err != nil {
					continue // gone
				}
				for _, t := range tasks {
					tid, err := strconv.Atoi(t.Name())
					if err != nil || done[tid] {
						continue
					}
					if err := unix.Setpriority(unix.PRIO_PROCESS, tid, 0); err != nil && err != unix.ESRCH {
						return fmt.Errorf("restore the priority of thread %d of sandbox %s: %w", tid, id, err)
					}
					done[tid] = true
					fresh++
				}
			}
		}
		if fresh == 0 {
			if len(done) == 0 {
				return fmt.Errorf("restore the priority of sandbox %s: no process found in its cgroup", id)
			}
			return nil
		}
	}
	return fmt.Errorf("restore the priority of sandbox %s: its threads kept multiplying", id)
}
