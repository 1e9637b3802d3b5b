package runtime

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestScratch: a scratch holds no more than its size (the writer gets
// ENOSPC), belongs to the uid it was made for, and RemoveScratch, as
// after a crash, leaves no file, mount or loop device.
func TestScratch(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (mkfs, loop devices, mounts)")
	}
	dir := filepath.Join(t.TempDir(), "clone")
	s, err := MakeScratch(t.Context(), dir, 16<<20, 4242, 4243)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { RemoveScratch(dir) })
	st, err := os.Stat(s.Root)
	if err != nil {
		t.Fatal(err)
	}
	if sys := st.Sys().(*syscall.Stat_t); sys.Uid != 4242 || sys.Gid != 4243 || st.Mode().Perm() != 0o700 {
		t.Fatalf("root: %d:%d %v", sys.Uid, sys.Gid, st.Mode())
	}
	f, err := os.Create(filepath.Join(s.Root, "big"))
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 1<<20)
	for i := range chunk {
		chunk[i] = byte(i)
	}
	var werr error
	for range 32 {
		if _, werr = f.Write(chunk); werr != nil {
			break
		}
	}
	if werr == nil {
		werr = f.Sync()
	}
	f.Close()
	if !errors.Is(werr, syscall.ENOSPC) {
		t.Fatalf("32 MiB into a 16 MiB scratch: %v; want ENOSPC", werr)
	}
	if !s.Full() {
		t.Error("a filled scratch is not Full")
	}
	img := filepath.Join(dir, diskImage)
	if err := RemoveScratch(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("%s is left: %v", dir, err)
	}
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	if strings.Contains(string(mi), dir) {
		t.Errorf("mount left:\n%s", mi)
	}
	if devs, _ := loopsBackedBy(img); len(devs) != 0 {
		t.Errorf("loop devices left: %v", devs)
	}
}
