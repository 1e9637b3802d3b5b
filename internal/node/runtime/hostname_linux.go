package runtime

import (
	"context"
	"fmt"
	"os"
	goruntime "runtime"

	"golang.org/x/sys/unix"

	"github.com/cove-dev/cove/api"
)

// SetHostname changes the hostname of a running sandbox, from the host: a
// thread joins the sandbox's UTS namespace, sets the name and is then
// discarded (it never returns to the host's namespace). Sandboxes cannot
// do it themselves: they lack CAP_SYS_ADMIN.
func (r *Runtime) SetHostname(ctx context.Context, id, name string) error {
	if len(name) == 0 || len(name) > 64 {
		return api.Errorf(api.CodeInvalidArgument, "hostname %q: want 1 to 64 bytes", name)
	}
	st, err := r.State(ctx, id)
	if err != nil {
		return err
	}
	if st.PID == 0 {
		return api.Errorf(api.CodeConflict, "sandbox %s is not running", id)
	}
	ns, err := os.Open(fmt.Sprintf("/proc/%d/ns/uts", st.PID))
	if err != nil {
		return fmt.Errorf("set hostname of %s: %w", id, err)
	}
	defer ns.Close()
	errc := make(chan error, 1)
	go func() {
		// The thread stays locked and so exits with this goroutine: it
		// must not run other goroutines inside the sandbox's namespace.
		goruntime.LockOSThread()
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWUTS); err != nil {
			errc <- fmt.Errorf("join UTS namespace: %w", err)
			return
		}
		errc <- unix.Sethostname([]byte(name))
	}()
	if err := <-errc; err != nil {
		return fmt.Errorf("set hostname of %s: %w", id, err)
	}
	return nil
}
