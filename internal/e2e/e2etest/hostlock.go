package e2etest

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// HostLock takes a lock named name that every test process on the machine
// shares, waiting for it, and holds it until the test ends. It is for what
// exists once per host, such as the host's route to 169.254.169.254 that
// the metadata test hosts need: test packages that run at once take it in
// turn instead of failing with "File exists" or removing each other's.
func HostLock(t testing.TB, name string) {
	t.Helper()
	if err := os.MkdirAll(lockDir, 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(lockDir, name+".lock"), os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		t.Fatalf("lock %s: %v", name, err)
	}
	t.Cleanup(func() { f.Close() }) // closing releases the lock
}
