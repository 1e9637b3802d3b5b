package runtime

import (
	"context"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/nsthread"
)

// SetHostname changes the hostname of a running sandbox, from the host: a
// thread joins the sandbox's UTS namespace, sets the name and is then
// discarded (package nsthread). Sandboxes cannot do it themselves: they
// lack CAP_SYS_ADMIN.
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
	// The namespace is the init's only if the PID still is the init's
	// once it is open (a PID is reused only after its process ended).
	if again, err := r.State(ctx, id); err != nil || again.PID != st.PID {
		return api.Errorf(api.CodeConflict, "sandbox %s stopped", id)
	}
	if err := nsthread.Run(int(ns.Fd()), unix.CLONE_NEWUTS, func() error {
		return unix.Sethostname([]byte(name))
	}); err != nil {
		return fmt.Errorf("set hostname of %s: %w", id, err)
	}
	return nil
}
