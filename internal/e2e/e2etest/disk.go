package e2etest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// SmallDisk mounts a fresh ext4 of sizeMiB on a loop device and returns its
// mount point, for a data dir that fills up; cleanup unmounts and removes
// it after the server's own cleanup (call it before StartServer).
func SmallDisk(t testing.TB, sizeMiB int) string {
	t.Helper()
	RequireRoot(t)
	dir, err := os.MkdirTemp("/var/tmp", "cove-e2e-disk-")
	if err != nil {
		t.Fatal(err)
	}
	img, mnt := filepath.Join(dir, "fs.img"), filepath.Join(dir, "mnt")
	t.Cleanup(func() {
		exec.Command("umount", mnt).Run()
		os.RemoveAll(dir)
	})
	for _, args := range [][]string{
		{"truncate", "-s", fmt.Sprintf("%dM", sizeMiB), img},
		{"mkfs.ext4", "-q", "-F", "-m", "0", img},
		{"mkdir", "-p", mnt},
		{"mount", "-o", "loop", img, mnt},
		{"chmod", "0711", dir, mnt}, // the sandboxes' mapped root traverses it
	} {
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v: %s", args, err, out)
		}
	}
	return mnt
}
