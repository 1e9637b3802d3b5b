package uidrange

import (
	"context"
	"encoding/json"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
	"github.com/cove-dev/cove/internal/node/image"
)

// oldBin builds cove and cove-agent as they were before sandboxes had
// ranges of their own: from the parent of the commit that added the
// idmapped mounts of images (the change's first). COVE_TEST_OLD_BIN names a directory with such a
// build instead. Without git history the test skips.
func oldBin(t *testing.T) string {
	t.Helper()
	if dir := os.Getenv("COVE_TEST_OLD_BIN"); dir != "" {
		return dir
	}
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Skipf("no git checkout to build the server from before ID ranges (set COVE_TEST_OLD_BIN): %v", err)
	}
	root := strings.TrimSpace(string(top))
	added, err := exec.Command("git", "-C", root, "log", "-1", "--format=%H", "--diff-filter=A", "--",
		"internal/node/runtime/idmap_linux.go").Output()
	if err != nil || len(strings.TrimSpace(string(added))) == 0 {
		t.Skipf("git history lacks the commit that added ID ranges (set COVE_TEST_OLD_BIN): %v", err)
	}
	src := t.TempDir()
	archive := exec.Command("sh", "-c", `git -C "$1" archive "$2^" | tar -x -C "$3"`, "sh", root, strings.TrimSpace(string(added)), src)
	if out, err := archive.CombinedOutput(); err != nil {
		t.Fatalf("git archive: %v: %s", err, out)
	}
	bin, err := os.MkdirTemp("/var/tmp", "cove-uidrange-oldbin-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(bin) })
	os.Chmod(bin, 0o711)
	for _, target := range []string{"cove", "cove-agent"} {
		// -trimpath: the build cache serves what did not change.
		cmd := exec.Command("go", "build", "-trimpath", "-o", filepath.Join(bin, target), "./cmd/"+target)
		cmd.Dir = src
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("build the old %s: %v: %s", target, err, out)
		}
	}
	return bin
}

// formatOneImage writes, at images/busybox, the test's busybox image as
// servers before ID ranges kept it: its IDs shifted to 1000000, with an
// image.json naming the shift.
func formatOneImage(t *testing.T, images string) {
	t.Helper()
	img, err := image.Load(e2etest.ImagesDir(), "busybox")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(images, "busybox")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cp", "-a", img.Rootfs, filepath.Join(dir, "rootfs")).CombinedOutput(); err != nil {
		t.Fatalf("copy image: %v: %s", err, out)
	}
	legacy := image.LegacyIDMap.HostID
	err = filepath.WalkDir(filepath.Join(dir, "rootfs"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		st := info.Sys().(*syscall.Stat_t)
		return os.Lchown(p, int(legacy+st.Uid), int(legacy+st.Gid))
	})
	if err != nil {
		t.Fatal(err)
	}
	meta, _ := json.Marshal(map[string]any{
		"name": "busybox", "shell": img.Shell,
		"ids": map[string]uint32{"host_id": legacy, "size": image.LegacyIDMap.Size},
	})
	if err := os.WriteFile(filepath.Join(dir, "image.json"), meta, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestLegacySaveWakes: a sandbox that a server from before ID ranges
// created and put to sleep wakes under the new server (which converts the
// old format's image and migrates the store) in the range all sandboxes
// shared then, its files with the owners they had; the old image's
// directory is left as it was.
func TestLegacySaveWakes(t *testing.T) {
	e2etest.RequireRoot(t)
	old := oldBin(t)
	images, err := os.MkdirTemp("/var/tmp", "cove-uidrange-legacy-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(images) })
	os.Chmod(images, 0o711)
	formatOneImage(t, images)

	s := e2etest.StartServer(t, e2etest.WithBin(old), e2etest.WithArgs("--images-dir", images, "--warm-pool", "0"))
	sb := e2etest.Create(t, s.Admin, api.CreateSandboxRequest{Name: "from-before"})
	if got := hostRange(t, s.Admin, sb.ID); got != image.LegacyIDMap.HostID {
		t.Fatalf("the old server maps root to %d", got)
	}
	e2etest.MustOK(t, s.Admin, sb.ID, "echo r > /root/by-root && mkdir /srv && echo o > /srv/by-4242 && chown 4242:4343 /srv/by-4242", e2etest.AsRoot)
	e2etest.MustOK(t, s.Admin, sb.ID, "echo u > /workspace/by-user && chmod 640 /workspace/by-user")
	const owners = "stat -c '%n %u:%g %a' /root/by-root /srv/by-4242 /workspace/by-user /workspace /etc/passwd; cat /workspace/by-user"
	want := e2etest.MustOK(t, s.Admin, sb.ID, owners, e2etest.AsRoot)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	if _, err := s.Admin.SleepSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Admin.WaitSandbox(ctx, sb.ID, api.StateAsleep, 4*time.Minute); err != nil || got.State != api.StateAsleep {
		t.Fatalf("sleep: %+v %v", got, err)
	}
	s.Stop(syscall.SIGTERM)

	// The new server, same data dir and images dir.
	s.UseBin(e2etest.BinDir())
	s.Start()
	if _, err := s.Admin.WakeSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Admin.WaitSandbox(ctx, sb.ID, api.StateRunning, 4*time.Minute); err != nil || got.State != api.StateRunning {
		t.Fatalf("wake: %+v %v\n%s", got, err, s.Tail(4000))
	}
	if got := hostRange(t, s.Admin, sb.ID); got != image.LegacyIDMap.HostID {
		t.Errorf("the woken sandbox maps root to %d, want the legacy %d", got, image.LegacyIDMap.HostID)
	}
	if got := e2etest.MustOK(t, s.Admin, sb.ID, owners, e2etest.AsRoot); got != want {
		t.Errorf("owners after the wake:\n%s\nwant, as before the sleep:\n%s", got, want)
	}
	if uid, _ := hostOwner(t, upper(s, sb.ID, "workspace/by-user")); uid != image.LegacyIDMap.HostID+1000 {
		t.Errorf("host owner of /workspace/by-user: %d", uid)
	}
	e2etest.MustOK(t, s.Admin, sb.ID, "echo again >> /workspace/by-user && touch /workspace/new")
	// The old image's directory is as the old server left it; the new
	// format's copy has the image's own IDs.
	if uid, _ := hostOwner(t, filepath.Join(images, "busybox", "rootfs", "etc", "passwd")); uid != image.LegacyIDMap.HostID {
		t.Errorf("the old image changed: /etc/passwd owned by %d", uid)
	}
	if uid, _ := hostOwner(t, filepath.Join(images, "v2", "busybox", "rootfs", "etc", "passwd")); uid != 0 {
		t.Errorf("the converted image's /etc/passwd is owned by %d", uid)
	}
	// A new sandbox beside it gets a range of its own.
	n := e2etest.Create(t, s.Admin, api.CreateSandboxRequest{})
	if got := hostRange(t, s.Admin, n.ID); got == image.LegacyIDMap.HostID {
		t.Errorf("a new sandbox got the legacy range")
	}
}
