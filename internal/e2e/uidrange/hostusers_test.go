package uidrange

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/cove-dev/cove/internal/e2e/e2etest"
	"github.com/cove-dev/cove/internal/node/image"
)

// TestImageTreesClosedToHostUsers: image trees keep their own IDs, so their
// set-uid binaries belong to host root; no host user but root may reach
// them (a sandbox reaches them only through its overlay).
func TestImageTreesClosedToHostUsers(t *testing.T) {
	e2etest.RequireRoot(t)
	img, err := image.Load(e2etest.ImagesDir(), "busybox")
	if err != nil {
		t.Fatal(err)
	}
	v2 := filepath.Dir(img.Dir)
	if st, err := os.Stat(v2); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("%s: %v, %v; want 0700", v2, st.Mode(), err)
	}
	for _, argv := range [][]string{
		{"/bin/ls", v2},
		{"/bin/ls", img.Rootfs},
		{"/usr/bin/stat", filepath.Join(img.Rootfs, "bin", "busybox")},
		{filepath.Join(img.Rootfs, "bin", "busybox"), "true"},
	} {
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		if out, err := cmd.CombinedOutput(); err == nil {
			t.Errorf("as nobody, %q succeeded: %s", argv, out)
		}
	}
}
