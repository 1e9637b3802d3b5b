package image

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: chown to an image's IDs")
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
	img, err := BuildBusybox(t.Context(), dir, "busybox")
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, "v2", "busybox", "rootfs"); img.Rootfs != want {
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
		{"", 0, 0, fs.ModeDir | 0o755},
		{"bin/busybox", 0, 0, 0o755},
		{"bin/sh", 0, 0, fs.ModeSymlink | 0o777},
		{"home/user", 1000, 1000, fs.ModeDir | 0o755},
		{"workspace", 1000, 1000, fs.ModeDir | 0o755},
		{"tmp", 0, 0, fs.ModeDir | fs.ModeSticky | 0o777},
		{"etc/passwd", 0, 0, 0o644},
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
	if loaded.Rootfs != img.Rootfs || loaded.Format != Format {
		t.Errorf("Load = %+v, want %+v", loaded, img)
	}
	// The trees hold host root's set-uid files: no other host user passes.
	if st, err := os.Stat(filepath.Join(dir, "v2")); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("images dir v2: %v, %v; want 0700", st.Mode(), err)
	}

	// Again: reused, not rebuilt.
	start := time.Now()
	if _, err := BuildBusybox(t.Context(), dir, "busybox"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "v2", "busybox", metaFile)); err != nil {
		t.Fatal(err)
	}
	t.Logf("second BuildBusybox took %v", time.Since(start))
}

// TestBuildAfterInterruption: an interrupted build leaves a temporary
// directory (and perhaps a final one without image.json, made by hand);
// Load refuses both and the next build replaces them.
func TestBuildAfterInterruption(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	tmp := filepath.Join(dir, "v2", ".busybox.tmp-123")
	mkdir(t, filepath.Join(tmp, "rootfs", "bin"))
	mkdir(t, filepath.Join(dir, "v2", "busybox", "rootfs"))
	if _, err := Load(dir, "busybox"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Load of a half image = %v, want not found", err)
	}
	if _, err := BuildBusybox(t.Context(), dir, "busybox"); err != nil {
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
	if _, err := BuildBusybox(ctx, dir, "other"); err == nil {
		t.Fatal("cancelled build: no error")
	}
	entries, _ := os.ReadDir(filepath.Join(dir, "v2"))
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

func TestUnshift(t *testing.T) {
	requireRoot(t)
	root := t.TempDir()
	ids := IDMap{HostID: 2000000, Size: 65536}
	if err := os.Lchown(root, 2000000, 2000000); err != nil {
		t.Fatal(err)
	}
	suid := filepath.Join(root, "suid")
	if err := os.WriteFile(suid, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(suid, 2000000, 2000000); err != nil {
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
	if err := os.Lchown(mine, 2001000, 2000005); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("nowhere", filepath.Join(root, "dangling")); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(filepath.Join(root, "dangling"), 2000000, 2000000); err != nil {
		t.Fatal(err)
	}
	for range 2 { // the second run must change nothing
		if err := Unshift(t.Context(), root, ids); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		path     string
		uid, gid uint32
	}{
		{"", 0, 0}, {"suid", 0, 0}, {"mine", 1000, 5}, {"dangling", 0, 0},
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

	// An ID beyond the shifted range is an error, not a wrap-around.
	bad := filepath.Join(t.TempDir(), "bad")
	if err := os.WriteFile(bad, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(bad, 2070000, 2000000); err != nil {
		t.Fatal(err)
	}
	if err := Unshift(t.Context(), filepath.Dir(bad), ids); err == nil {
		t.Error("Unshift of uid 2070000 with 2000000+65536: no error")
	}
}

// TestConvertFormat1: an image of the first format (IDs shifted, at
// <imagesDir>/<name>) is never loaded as an image; Convert copies it into
// v2 with its IDs shifted back and leaves the old one as it was, for older
// servers that share the images dir.
func TestConvertFormat1(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	old := filepath.Join(dir, "old", "rootfs")
	mkdir(t, filepath.Join(old, "bin"))
	mkdir(t, filepath.Join(old, "home", "user"))
	for _, p := range []string{"", "bin", "home"} {
		if err := os.Lchown(filepath.Join(old, p), 1000000, 1000000); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Lchown(filepath.Join(old, "home", "user"), 1001000, 1001000); err != nil {
		t.Fatal(err)
	}
	su := filepath.Join(old, "bin", "su")
	if err := os.WriteFile(su, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(su, 1000000, 1000000); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(su, 0o755|fs.ModeSetuid); err != nil {
		t.Fatal(err)
	}
	meta := `{"name": "old", "shell": ["/bin/sh", "-c"], "ids": {"host_id": 1000000, "size": 65536}}`
	if err := os.WriteFile(filepath.Join(dir, "old", metaFile), []byte(meta), 0o644); err != nil {
		t.Fatal(err)
	}

	if _, err := Load(dir, "old"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Load of a format 1 image = %v, want not found", err)
	}
	if imgs, err := List(dir); err != nil || len(imgs) != 0 {
		t.Fatalf("List = %+v, %v; want none", imgs, err)
	}
	names, err := Convert(t.Context(), dir, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(names, []string{"old"}) {
		t.Errorf("Convert = %q", names)
	}
	img, err := Load(dir, "old")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(img.Shell, []string{"/bin/sh", "-c"}) || img.Format != Format {
		t.Errorf("converted image = %+v", img)
	}
	for _, c := range []struct {
		path     string
		uid, gid uint32
	}{
		{"", 0, 0}, {"bin/su", 0, 0}, {"home/user", 1000, 1000}, {AgentMountPoint[1:], 0, 0},
	} {
		if uid, gid := owner(t, filepath.Join(img.Rootfs, c.path)); uid != c.uid || gid != c.gid {
			t.Errorf("converted %s owned by %d:%d, want %d:%d", c.path, uid, gid, c.uid, c.gid)
		}
		if c.path == AgentMountPoint[1:] {
			continue
		}
		if uid, _ := owner(t, filepath.Join(old, c.path)); uid < 1000000 {
			t.Errorf("old %s changed: owned by %d", c.path, uid)
		}
	}
	if st, err := os.Stat(filepath.Join(img.Rootfs, "bin/su")); err != nil || st.Mode()&fs.ModeSetuid == 0 {
		t.Errorf("converted su: %v, %v; want setuid", st.Mode(), err)
	}
	// Converted once: a second Convert finds nothing to do.
	if names, err := Convert(t.Context(), dir, slog.New(slog.DiscardHandler)); err != nil || len(names) != 0 {
		t.Errorf("second Convert = %q, %v", names, err)
	}
	// A build of the same name converts rather than builds.
	os.RemoveAll(filepath.Join(dir, "v2", "old"))
	if img, err := BuildBusybox(t.Context(), dir, "old"); err != nil || !slices.Equal(img.Shell, []string{"/bin/sh", "-c"}) {
		t.Fatalf("BuildBusybox over a format 1 image = %+v, %v", img, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "v2", "old", "rootfs", "bin", "busybox")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("built instead of converted: %v", err)
	}
}

// TestEnsureRecipe: an image built from a recipe is used as long as the
// recipe is the same, and built again when it changes (ManagedPackages
// gaining sudo reaches an images dir that holds an older build). The tree
// it replaces is set aside whole, for sandboxes that run on it, and is no
// image of List's.
func TestEnsureRecipe(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	builds := 0
	build := func(ctx context.Context, rootfs string) ([]string, error) {
		builds++
		return []string{"/bin/sh", "-c"}, os.WriteFile(filepath.Join(rootfs, "built"), []byte(strconv.Itoa(builds)), 0o644)
	}
	marker := func(img Image) string {
		b, err := os.ReadFile(filepath.Join(img.Rootfs, "built"))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	ensureR := func(recipe string) Image {
		t.Helper()
		img, err := ensureRecipe(t.Context(), dir, "made", recipe, slog.New(slog.DiscardHandler), build)
		if err != nil {
			t.Fatal(err)
		}
		return img
	}
	if img := ensureR("r1"); img.Recipe != "r1" || marker(img) != "1" {
		t.Fatalf("first build: %+v built %s", img, marker(img))
	}
	if img := ensureR("r1"); builds != 1 || marker(img) != "1" {
		t.Fatalf("the same recipe built again (%d builds)", builds)
	}
	if !Current(dir, "made", "r1") || Current(dir, "made", "r2") || Current(dir, "absent", "r1") {
		t.Error("Current does not tell the image's recipe")
	}
	img := ensureR("r2")
	if builds != 2 || img.Recipe != "r2" || marker(img) != "2" {
		t.Fatalf("another recipe: %d builds, %+v built %s", builds, img, marker(img))
	}
	if got, err := Load(dir, "made"); err != nil || got.Recipe != "r2" {
		t.Fatalf("Load after the rebuild = %+v, %v", got, err)
	}
	old, _ := filepath.Glob(filepath.Join(dir, "v2", ".made.old-*", "made", "rootfs", "built"))
	if len(old) != 1 {
		t.Fatalf("the old tree was not set aside: %v", old)
	} else if b, _ := os.ReadFile(old[0]); string(b) != "1" {
		t.Errorf("the tree set aside holds build %q, want 1", b)
	}
	if imgs, err := List(dir); err != nil || len(imgs) != 1 || imgs[0].Name != "made" {
		t.Errorf("List = %+v, %v", imgs, err)
	}
	// ensure, without a recipe, takes any complete image.
	if _, err := ensure(t.Context(), dir, "made", slog.New(slog.DiscardHandler), build); err != nil || builds != 2 {
		t.Errorf("ensure without a recipe built again (%d builds): %v", builds, err)
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
	img, err := EnsureManaged(t.Context(), dir, t.Output(), log)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("EnsureManaged took %v", time.Since(start))
	for _, p := range []string{"bin/bash", "usr/bin/git", "usr/bin/python3", "usr/bin/node", "usr/bin/curl", "workspace", "home/user"} {
		if _, err := os.Lstat(filepath.Join(img.Rootfs, p)); err != nil {
			t.Errorf("managed image lacks /%s: %v", p, err)
		}
	}
	if uid, gid := owner(t, filepath.Join(img.Rootfs, "workspace")); uid != 1000 || gid != 1000 {
		t.Errorf("/workspace owned by %d:%d", uid, gid)
	}
	passwd, err := os.ReadFile(filepath.Join(img.Rootfs, "etc/passwd"))
	if err != nil {
		t.Fatal(err)
	}
	if !containsLine(string(passwd), "user:x:1000:1000::/home/user:/bin/bash") {
		t.Errorf("/etc/passwd has no user 1000:\n%s", passwd)
	}
	// setuid is kept (su and passwd are in minbase): a converted image of
	// format 1 had it put back after the shift back.
	st, err := os.Stat(filepath.Join(img.Rootfs, "usr/bin/su"))
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode()&fs.ModeSetuid == 0 {
		t.Errorf("/usr/bin/su lost setuid: %v", st.Mode())
	}
	if st, err := os.Stat(filepath.Join(img.Rootfs, "usr/bin/sudo")); err != nil || st.Mode()&fs.ModeSetuid == 0 {
		t.Errorf("/usr/bin/sudo is missing or not set-uid: %v", err)
	}
	if img.Recipe != ManagedRecipe() {
		t.Errorf("the image's recipe is %q, want %q", img.Recipe, ManagedRecipe())
	}
}

func containsLine(s, line string) bool {
	return slices.Contains(strings.Split(s, "\n"), line)
}
