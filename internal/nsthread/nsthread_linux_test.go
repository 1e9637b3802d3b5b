package nsthread

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

const testHostname = "nsthread-test"

// newUTSNamespace makes a UTS namespace named testHostname and returns a
// descriptor of it. The thread that made it is thrown away like Run's.
func newUTSNamespace(t *testing.T) int {
	t.Helper()
	type result struct {
		fd  int
		err error
	}
	res := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with us
		if err := unix.Unshare(unix.CLONE_NEWUTS); err != nil {
			res <- result{-1, fmt.Errorf("unshare: %w", err)}
			return
		}
		if err := unix.Sethostname([]byte(testHostname)); err != nil {
			res <- result{-1, fmt.Errorf("sethostname: %w", err)}
			return
		}
		fd, err := unix.Open("/proc/thread-self/ns/uts", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		res <- result{fd, err}
	}()
	r := <-res
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Cleanup(func() { unix.Close(r.fd) })
	return r.fd
}

func hostname() (string, error) {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "", err
	}
	return unix.ByteSliceToString(u.Nodename[:]), nil
}

func TestRun(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("nsthread tests need root: they create and join a UTS namespace (CAP_SYS_ADMIN)")
	}
	ns := newUTSNamespace(t)
	host, err := hostname()
	if err != nil {
		t.Fatal(err)
	}
	errFn := errors.New("from fn")

	tests := []struct {
		name   string
		nstype int
		fn     func(seen *string) error
		want   string // the hostname fn sees; "" when fn must not run
		err    error  // errors.Is the result; nil: no error
	}{
		{"joins the namespace", unix.CLONE_NEWUTS, nil, testHostname, nil},
		{"any type", 0, nil, testHostname, nil},
		{"fn's error", unix.CLONE_NEWUTS, func(*string) error { return errFn }, "", errFn},
		{"wrong type", unix.CLONE_NEWNET, nil, "", unix.EINVAL},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var seen string
			tid := 0
			fn := func() error {
				tid = unix.Gettid()
				if tt.fn != nil {
					return tt.fn(&seen)
				}
				var err error
				seen, err = hostname()
				return err
			}
			err := Run(ns, tt.nstype, fn)
			if tt.err == nil && err != nil || tt.err != nil && !errors.Is(err, tt.err) {
				t.Fatalf("Run: %v, want %v", err, tt.err)
			}
			if seen != tt.want {
				t.Errorf("fn saw hostname %q, want %q", seen, tt.want)
			}
			// The caller stays in the host's namespace.
			if h, err := hostname(); err != nil || h != host {
				t.Errorf("caller's hostname %q (%v), want %q", h, err, host)
			}
			// The thread that joined is thrown away. Wait for that state,
			// not a clock: a thread handed back to the scheduler shows as
			// this test hanging here. (The main thread cannot exit; the
			// runtime parks it for good instead.)
			if tid != 0 && tid != os.Getpid() {
				for {
					if _, err := os.Stat(fmt.Sprintf("/proc/self/task/%d", tid)); errors.Is(err, os.ErrNotExist) {
						break
					}
					runtime.Gosched()
				}
			}
		})
	}
}
