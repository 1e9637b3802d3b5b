package uidrange

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
	"github.com/cove-dev/cove/internal/node/image"
)

// TestHostOwnersDiffer: two sandboxes are two host ID ranges. What each
// writes is owned, on the host, by its own range (root and user alike),
// and its processes run as its own host uids. A sandbox keeps its range
// asleep and wakes in it.
func TestHostOwnersDiffer(t *testing.T) {
	s := e2etest.StartServer(t, e2etest.WithArgs("--warm-pool", "0"))
	a := e2etest.Create(t, s.Admin, api.CreateSandboxRequest{})
	b := e2etest.Create(t, s.Admin, api.CreateSandboxRequest{})
	ra, rb := hostRange(t, s.Admin, a.ID), hostRange(t, s.Admin, b.ID)
	if ra == rb || ra == image.LegacyIDMap.HostID || rb == image.LegacyIDMap.HostID || ra == 0 || rb == 0 {
		t.Fatalf("sandboxes map root to host uids %d and %d: want two ranges of their own", ra, rb)
	}
	for _, sb := range []struct {
		id   string
		base uint32
	}{{a.ID, ra}, {b.ID, rb}} {
		e2etest.MustOK(t, s.Admin, sb.id, "echo r > /root/by-root", e2etest.AsRoot)
		e2etest.MustOK(t, s.Admin, sb.id, "echo u > /workspace/by-user && (sleep 600 >/dev/null 2>&1 &)")
		for _, f := range []struct {
			path string
			uid  uint32
		}{{"root/by-root", sb.base}, {"workspace/by-user", sb.base + 1000}, {"workspace", sb.base + 1000}} {
			if uid, gid := hostOwner(t, upper(s, sb.id, f.path)); uid != f.uid || gid != f.uid {
				t.Errorf("sandbox %s's /%s is %d:%d on the host, want %d:%d", sb.id, f.path, uid, gid, f.uid, f.uid)
			}
		}
		if uid := procUID(t, agentPID(t, s, sb.id)); uid != sb.base {
			t.Errorf("sandbox %s's agent runs as host uid %d, want %d", sb.id, uid, sb.base)
		}
		uids := processUIDs(t, sb.id)
		if uids[sb.base] == 0 || uids[sb.base+1000] == 0 {
			t.Errorf("sandbox %s's processes run as host uids %v, want %d (root) and %d (user)", sb.id, uids, sb.base, sb.base+1000)
		}
		for uid := range uids {
			if uid < sb.base || uid >= sb.base+65536 {
				t.Errorf("sandbox %s has a process of host uid %d, outside its range %d+65536", sb.id, uid, sb.base)
			}
		}
	}

	// Asleep, a keeps its range (held, so no new sandbox gets it): it
	// wakes in it, with its files' owners.
	const owners = "stat -c '%n %u:%g' /root/by-root /workspace/by-user"
	want := e2etest.MustOK(t, s.Admin, a.ID, owners, e2etest.AsRoot)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	if _, err := s.Admin.SleepSandbox(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if sb, err := s.Admin.WaitSandbox(ctx, a.ID, api.StateAsleep, 4*time.Minute); err != nil || sb.State != api.StateAsleep {
		t.Fatalf("sleep: %+v %v", sb, err)
	}
	c := e2etest.Create(t, s.Admin, api.CreateSandboxRequest{})
	if rc := hostRange(t, s.Admin, c.ID); rc == ra || rc == rb {
		t.Errorf("a new sandbox got host uid %d, held by an asleep or running one", rc)
	}
	if _, err := s.Admin.WakeSandbox(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if sb, err := s.Admin.WaitSandbox(ctx, a.ID, api.StateRunning, 4*time.Minute); err != nil || sb.State != api.StateRunning {
		t.Fatalf("wake: %+v %v", sb, err)
	}
	if got := hostRange(t, s.Admin, a.ID); got != ra {
		t.Errorf("a woke mapping root to %d, slept with %d", got, ra)
	}
	if got := e2etest.MustOK(t, s.Admin, a.ID, owners, e2etest.AsRoot); got != want {
		t.Errorf("owners after the wake: %q, want %q", got, want)
	}
	if uid, _ := hostOwner(t, upper(s, a.ID, "workspace/by-user")); uid != ra+1000 {
		t.Errorf("host owner of a's /workspace/by-user after the wake: %d, want %d", uid, ra+1000)
	}
}

// entry is what a test compares of a file in the image's tree.
type entry struct {
	Mode     fs.FileMode
	UID, GID uint32
	Size     int64
	Sum      string
}

// snapshot records every entry of the tree at root: mode, owner, size and
// the sha-256 of regular files.
func snapshot(t *testing.T, root string) map[string]entry {
	t.Helper()
	m := map[string]entry{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		st := info.Sys().(*syscall.Stat_t)
		e := entry{Mode: info.Mode(), UID: st.Uid, GID: st.Gid, Size: info.Size()}
		if info.Mode().IsRegular() {
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			h := sha256.New()
			_, err = io.Copy(h, f)
			f.Close()
			if err != nil {
				return err
			}
			e.Sum = fmt.Sprintf("%x", h.Sum(nil))
		}
		rel, _ := filepath.Rel(root, p)
		m[rel] = e
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestSharedImageUntouched: root in one sandbox changes, links, chowns,
// chmods, renames and removes files of the image it shares with others:
// it changes only its own view. Another sandbox (running before, or
// started after) sees the image as it was, and the tree on disk is as it
// was to the byte, owners and modes included. What one sandbox writes is
// nowhere in another.
func TestSharedImageUntouched(t *testing.T) {
	s := e2etest.StartServer(t, e2etest.WithArgs("--warm-pool", "0"))
	img, err := image.Load(e2etest.ImagesDir(), "busybox")
	if err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, img.Rootfs)
	a := e2etest.Create(t, s.Admin, api.CreateSandboxRequest{})
	b := e2etest.Create(t, s.Admin, api.CreateSandboxRequest{})

	// As user, the image's files are root's: not writable.
	res := e2etest.Sh(t, s.Admin, a.ID, "echo evil >> /etc/passwd")
	if e2etest.ExitCode(res) == 0 {
		t.Errorf("user appended to /etc/passwd")
	}
	e2etest.MustOK(t, s.Admin, a.ID, strings.Join([]string{
		"echo evil >> /etc/passwd",
		"ln /etc/hostname /root/hardlink && echo evil >> /root/hardlink",
		"chown 1000:1000 /bin/busybox && chmod 4777 /bin/busybox",
		"rm /etc/group && mv /etc/hosts /etc/hosts.moved",
		"echo evil > /bin/planted && touch -d 2001-01-01 /etc/hostname",
		"echo secret > /tmp/a-secret",
	}, " && "), e2etest.AsRoot)
	if got := e2etest.MustOK(t, s.Admin, a.ID, "stat -c %u:%a /bin/busybox; grep -c evil /etc/passwd", e2etest.AsRoot); got != "1000:4777\n1\n" {
		t.Fatalf("sandbox a's own view after its changes: %q", got)
	}
	c := e2etest.Create(t, s.Admin, api.CreateSandboxRequest{})
	for _, id := range []string{b.ID, c.ID} {
		got := e2etest.MustOK(t, s.Admin, id, strings.Join([]string{
			"grep -c evil /etc/passwd /etc/hostname || true",
			"stat -c %u:%g:%a /bin/busybox /etc/group /etc/hosts",
			"ls /bin/planted /tmp/a-secret /etc/hosts.moved 2>&1 || true",
			"grep -rl secret /tmp /root /workspace 2>/dev/null || true",
		}, "; "), e2etest.AsRoot)
		want := "/etc/passwd:0\n/etc/hostname:0\n0:0:755\n0:0:644\n0:0:644\n" +
			"ls: /bin/planted: No such file or directory\nls: /tmp/a-secret: No such file or directory\nls: /etc/hosts.moved: No such file or directory\n"
		if got != want {
			t.Errorf("sandbox %s sees a's changes:\n%s\nwant:\n%s", id, got, want)
		}
	}
	if d := cmp.Diff(before, snapshot(t, img.Rootfs)); d != "" {
		t.Errorf("the image's tree on disk changed (-before +after):\n%s", d)
	}
}
