package backup

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cove-dev/cove/internal/fsfreeze"
)

// TestWithFrozenFreezes: while a mounted volume is copied its filesystem
// is frozen (a second freeze is refused with EBUSY), and it is thawed
// after (a freeze then succeeds); an unmounted one is copied as it is.
func TestWithFrozenFreezes(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a loop device")
	}
	if _, err := exec.LookPath("mkfs.ext4"); err != nil {
		t.Skip("no mkfs.ext4")
	}
	dir := t.TempDir()
	img, mnt := filepath.Join(dir, "disk.img"), filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("truncate", "-s", "16M", img).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", img).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	// Unmounted: fn runs, nothing to freeze.
	ran := false
	if err := withFrozen(mnt, func() error { ran = true; return nil }); err != nil || !ran {
		t.Fatalf("withFrozen on an unmounted dir: ran %v, %v", ran, err)
	}
	if out, err := exec.Command("mount", "-o", "loop", img, mnt).CombinedOutput(); err != nil {
		t.Fatalf("mount: %v: %s", err, out)
	}
	t.Cleanup(func() { unix.Unmount(mnt, unix.MNT_DETACH) })
	// A second freeze is refused while the copy runs, and one after it
	// succeeds: it was thawed.
	probe := func() error { return fsfreeze.Do(mnt, func() error { return nil }) }
	err := withFrozen(mnt, func() error {
		if err := probe(); !errors.Is(err, fsfreeze.ErrFrozen) {
			t.Errorf("a freeze during the copy: %v, want frozen already", err)
		}
		if err := withFrozen(mnt, func() error { return nil }); err == nil || !strings.Contains(err.Error(), "frozen already (another backup runs?") {
			t.Errorf("a second backup's copy: %v, want frozen already", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := probe(); err != nil {
		t.Fatalf("a freeze after the copy: %v, want it thawed", err)
	}
}
