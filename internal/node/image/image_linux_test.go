package image

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: chown to the mapped host IDs")
	}
}

func owner(t *testing.T, path string) (uid, gid uint32) {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Uid, st.Gid
}

func TestBuildBusybox(t *testing.T) {
	requireRoot(t)
	if _, err := os.Stat(BusyboxPath); err != nil {
		t.Skipf("needs %s (busybox-static): %v", BusyboxPath, err)
	}
	dir := t.TempDir()
	ids := IDMap{HostID: 2000000, Size: 65536}
	img, err := BuildBusybox(t.Context(), dir, "busybox", ids)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, "busybox", "rootfs"); img.Rootfs != want {
		t.Errorf("Rootfs = %q, want %q", img.Rootfs, want)
	}
	if len(img.Shell) != 2 || img.Shell[0] != "/bin/sh" {
		t.Errorf("Shell = %q", img.Shell)
	}
	for _, c := range []struct {
		path     string
		uid, gid uint32
		mode     fs.FileMode
	}{
		{"", 2000000, 2000000, fs.ModeDir | 0o755},
		{"bin/busybox", 2000000, 2000000, 0o755},
		{"bin/sh", 2000000, 2000000, fs.ModeSymlink | 0o777},
		{"home/user", 2001000, 2001000, fs.ModeDir | 0o755},
		{"workspace", 2001000, 2001000, fs.ModeDir | 0o755},
		{"tmp", 2000000, 2000000, fs.ModeDir | fs.ModeSticky | 0o777},
		{"etc/passwd", 2000000, 2000000, 0o644},
	} {
		p := filepath.Join(img.Rootfs, c.path)
		uid, gid := owner(t, p)
		if uid != c.uid || gid != c.gid {
			t.Errorf("%s owned by %d:%d, want %d:%d", c.path, uid, gid, c.uid, c.gid)
		}
		st, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode() != c.mode {
			t.Errorf("%s mode %v, want %v", c.path, st.Mode(), c.mode)
		}
	}

	loaded, err := Load(dir, "busybox")
	if err != nil {
		t.Fatal(err)
	}
	if loaded.Rootfs != img.Rootfs || loaded.IDs != ids {
		t.Errorf("Load = %+v, want %+v", loaded, img)
	}

	// Again: reused, not rebuilt.
	start := time.Now()
	if _, err := BuildBusybox(t.Context(), dir, "busybox", ids); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "busybox", metaFile)); err != nil {
		t.Fatal(err)
	}
	t.Logf("second BuildBusybox took %v", time.Since(start))

	// Another mapping is refused rather than silently mixed.
	if _, err := BuildBusybox(t.Context(), dir, "busybox", IDMap{HostID: 3000000, Size: 65536}); err == nil {
		t.Error("BuildBusybox with another id map: no error")
	}
}

// TestBuildAfterInterruption: an interrupted build leaves a temporary
// directory (and perhaps a final one without image.json, made by hand);
// Load refuses both and the next build replaces them.
func TestBuildAfterInterruption(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	tmp := filepath.Join(dir, ".busybox.tmp-123")
	mkdir(t, filepath.Join(tmp, "rootfs", "bin"))
	mkdir(t, filepath.Join(dir, "busybox", "rootfs"))
	if _, err := Load(dir, "busybox"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Load of a half image = %v, want not found", err)
	}
	if _, err := BuildBusybox(t.Context(), dir, "busybox", IDMap{}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(tmp); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s left: %v", tmp, err)
	}
	if _, err := Load(dir, "busybox"); err != nil {
		t.Error(err)
	}
	if imgs, err := List(dir); err != nil || len(imgs) != 1 || imgs[0].Name != "busybox" {
		t.Errorf("List = %+v, %v", imgs, err)
	}
	// A cancelled build leaves nothing that Load accepts, nor a temporary
	// directory.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := BuildBusybox(ctx, dir, "other", IDMap{}); err == nil {
		t.Fatal("cancelled build: no error")
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".other.tmp") || e.Name() == "other" {
			t.Errorf("cancelled build left %s", e.Name())
		}
	}
}

func TestLoadIncomplete(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name  string
		setup func(t *testing.T, imgDir string)
	}{
		{"absent", func(t *testing.T, imgDir string) {}},
		{"no image.json", func(t *testing.T, imgDir string) {
			mkdir(t, filepath.Join(imgDir, "rootfs"))
		}},
		{"no rootfs", func(t *testing.T, imgDir string) {
			mkdir(t, imgDir)
			if err := writeMeta(imgDir, Image{Name: filepath.Base(imgDir), Shell: []string{"/bin/sh", "-c"}}); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name := "img" + string(rune('a'+i))
			tt.setup(t, filepath.Join(dir, name))
			_, err := Load(dir, name)
			if !errors.Is(err, ErrNotFound) {
				t.Errorf("Load = %v, want ErrNotFound", err)
			}
		})
	}
	if _, err := Load(dir, "../etc"); err == nil || errors.Is(err, ErrNotFound) {
		t.Errorf("Load(../etc) = %v, want a bad name error", err)
	}
}

func mkdir(t *testing.T, p string) {
	t.Helper()
	if err := os.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
}

func TestShift(t *testing.T) {
	requireRoot(t)
	root := t.TempDir()
	ids := IDMap{HostID: 2000000, Size: 65536}
	suid := filepath.Join(root, "suid")
	if err := os.WriteFile(suid, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(suid, 0o755|fs.ModeSetuid|fs.ModeSetgid); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(root, "hardlink")
	if err := os.Link(suid, link); err != nil {
		t.Fatal(err)
	}
	mine := filepath.Join(root, "mine")
	if err := os.WriteFile(mine, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(mine, 1000, 5); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("nowhere", filepath.Join(root, "dangling")); err != nil {
		t.Fatal(err)
	}
	for range 2 { // the second run must change nothing
		if err := Shift(t.Context(), root, ids); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		path     string
		uid, gid uint32
	}{
		{"", 2000000, 2000000}, {"suid", 2000000, 2000000}, {"mine", 2001000, 2000005}, {"dangling", 2000000, 2000000},
	} {
		if uid, gid := owner(t, filepath.Join(root, c.path)); uid != c.uid || gid != c.gid {
			t.Errorf("%s owned by %d:%d, want %d:%d", c.path, uid, gid, c.uid, c.gid)
		}
	}
	st, err := os.Stat(suid)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode()&(fs.ModeSetuid|fs.ModeSetgid) != fs.ModeSetuid|fs.ModeSetgid {
		t.Errorf("setuid/setgid lost: %v", st.Mode())
	}

	// An ID beyond the mapped range is an error, not a wrap-around.
	bad := filepath.Join(t.TempDir(), "bad")
	if err := os.WriteFile(bad, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(bad, 70000, 0); err != nil {
		t.Fatal(err)
	}
	if err := Shift(t.Context(), filepath.Dir(bad), ids); err == nil {
		t.Error("Shift of uid 70000 with size 65536: no error")
	}
}

// TestEnsureManaged builds the managed Debian image with debootstrap (a
// minute of downloads). It runs only with COVE_TEST_MANAGED=1; set
// COVE_TEST_IMAGES to a lasting directory to build once and reuse.
func TestEnsureManaged(t *testing.T) {
	if os.Getenv("COVE_TEST_MANAGED") != "1" {
		t.Skip("set COVE_TEST_MANAGED=1 to debootstrap the managed image (downloads ~100 MB)")
	}
	requireRoot(t)
	dir := os.Getenv("COVE_TEST_IMAGES")
	if dir == "" {
		dir = t.TempDir()
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	start := time.Now()
	img, err := EnsureManaged(t.Context(), dir, IDMap{}, t.Output(), log)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("EnsureManaged took %v", time.Since(start))
	for _, p := range []string{"bin/bash", "usr/bin/git", "usr/bin/python3", "usr/bin/node", "usr/bin/curl", "workspace", "home/user"} {
		if _, err := os.Lstat(filepath.Join(img.Rootfs, p)); err != nil {
			t.Errorf("managed image lacks /%s: %v", p, err)
		}
	}
	if uid, gid := owner(t, filepath.Join(img.Rootfs, "workspace")); uid != DefaultIDMap.HostID+1000 || gid != DefaultIDMap.HostID+1000 {
		t.Errorf("/workspace owned by %d:%d", uid, gid)
	}
	passwd, err := os.ReadFile(filepath.Join(img.Rootfs, "etc/passwd"))
	if err != nil {
		t.Fatal(err)
	}
	if !containsLine(string(passwd), "user:x:1000:1000::/home/user:/bin/bash") {
		t.Errorf("/etc/passwd has no user 1000:\n%s", passwd)
	}
	// setuid survived the shift (su and passwd are in minbase).
	st, err := os.Stat(filepath.Join(img.Rootfs, "usr/bin/su"))
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode()&fs.ModeSetuid == 0 {
		t.Errorf("/usr/bin/su lost setuid: %v", st.Mode())
	}
}

func containsLine(s, line string) bool {
	return slices.Contains(strings.Split(s, "\n"), line)
}
