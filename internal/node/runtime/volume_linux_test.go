package runtime

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/agent/client"
	"github.com/cove-dev/cove/internal/mountinfo"
	"github.com/cove-dev/cove/internal/node/image"
)

var volumeSeq int

// newVolume creates a volume of sizeMiB and drops it when the test ends
// (after the sandboxes, whose cleanups run first).
func newVolume(t *testing.T, r *Runtime, sizeMiB int64) string {
	t.Helper()
	volumeSeq++
	id := fmt.Sprintf("vol_%d_%d", os.Getpid(), volumeSeq)
	if err := r.CreateVolume(t.Context(), id, sizeMiB); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.DropVolume(context.Background(), id); err != nil {
			t.Error(err)
		}
	})
	return id
}

// mustSh runs script and fails the test unless it exits 0.
func mustSh(t *testing.T, c *client.Client, uid int, script string) string {
	t.Helper()
	out, exit := sh(t, c, uid, script)
	if exit.ExitCode != 0 {
		t.Fatalf("%q as %d: exit %d: %s", script, uid, exit.ExitCode, out)
	}
	return out
}

// TestVolumeShared: two sandboxes in different host ranges mount one
// volume and see each other's files owned as their own user's; the
// files are kept with the sandbox IDs on the host; the quota ends writes
// with ENOSPC inside, not the sandbox's own disk; a read-only mount
// refuses writes; the volume cannot be dropped while mounted.
func TestVolumeShared(t *testing.T) {
	r := newRuntime(t)
	vol := newVolume(t, r, 32)
	specs := []Spec{testSpec(), testSpec()}
	specs[0].IDs = image.IDMap{HostID: 1 << 30, Size: 65536}
	specs[1].IDs = image.IDMap{HostID: 1<<30 + 65536, Size: 65536}
	specs[0].Volumes = []VolumeMount{{ID: vol, Path: "/vol"}}
	specs[1].Volumes = []VolumeMount{{ID: vol, Path: "/mnt/shared"}, {ID: vol, Path: "/ro", ReadOnly: true}}
	a, b := start(t, r, specs[0]), start(t, r, specs[1])

	mustSh(t, a, 1000, "echo from-a > /vol/a")
	if out := mustSh(t, b, 0, "ls -ln /mnt/shared/a | tr -s ' ' | cut -d' ' -f3,4; cat /mnt/shared/a"); out != "1000 1000\nfrom-a" {
		t.Errorf("b sees a's file as %q", out)
	}
	mustSh(t, b, 1000, "echo from-b > /mnt/shared/b")
	if out := mustSh(t, a, 0, "ls -ln /vol/b | tr -s ' ' | cut -d' ' -f3,4; cat /vol/b"); out != "1000 1000\nfrom-b" {
		t.Errorf("a sees b's file as %q", out)
	}
	// user of one sandbox is user of the other: b's user may change a's.
	mustSh(t, b, 1000, "echo again >> /mnt/shared/a")
	if out := mustSh(t, a, 1000, "cat /vol/a"); out != "from-a\nagain" {
		t.Errorf("a's file after b's write: %q", out)
	}
	mustSh(t, a, 0, "echo root > /vol/r")
	if out := mustSh(t, b, 1000, "ls -ln /ro/r | tr -s ' ' | cut -d' ' -f3,4"); out != "0 0" {
		t.Errorf("a's root's file in b: %q", out)
	}
	// On the host the files have the IDs the sandboxes see, not either
	// sandbox's host range.
	mnt := filepath.Join(r.volumeDir(vol), "mnt")
	for name, want := range map[string]uint32{"a": 1000, "b": 1000, "r": 0} {
		if uid, gid := hostOwner(t, filepath.Join(mnt, name)); uid != want || gid != want {
			t.Errorf("host owner of %s: %d:%d, want %d", name, uid, gid, want)
		}
	}

	// Read-only.
	if out, exit := sh(t, b, 0, "touch /ro/x"); exit.ExitCode == 0 || !strings.Contains(out, "Read-only file system") {
		t.Errorf("touch in a read-only volume: exit %d: %s", exit.ExitCode, out)
	}

	// The quota.
	if out, exit := sh(t, a, 1000, "dd if=/dev/zero of=/vol/big bs=1M count=64"); exit.ExitCode == 0 || !strings.Contains(out, "No space left on device") {
		t.Errorf("dd past the quota: exit %d: %s", exit.ExitCode, out)
	}
	u, err := r.VolumeUsage(t.Context(), vol)
	if err != nil {
		t.Fatal(err)
	}
	if !u.Full || u.SizeBytes < 16<<20 || u.SizeBytes > 32<<20 || u.UsedBytes < 16<<20 {
		t.Errorf("usage of the full volume: %+v", u)
	}
	// The sandboxes' own disks are not touched.
	mustSh(t, a, 1000, "echo mine > /tmp/mine && cat /tmp/mine")
	mustSh(t, b, 1000, "dd if=/dev/zero of=/tmp/x bs=1M count=4")
	mustSh(t, a, 1000, "rm /vol/big")
	if u, err := r.VolumeUsage(t.Context(), vol); err != nil || u.Full {
		t.Errorf("usage after rm: %+v %v", u, err)
	}

	// Mounted: not dropped.
	if err := r.DropVolume(t.Context(), vol); api.ErrorCode(err) != api.CodePreconditionFailed {
		t.Errorf("drop of a mounted volume: %v", err)
	}
	users, err := r.VolumeUsers(vol)
	if want := []string{specs[0].ID, specs[1].ID}; err != nil || !slices.Equal(users, want) {
		t.Errorf("users: %v %v", users, err)
	}
}

// TestVolumeHostile: what a sandbox does in a volume stays in the
// sandboxes: its symlinks resolve in the sandbox that follows them, hard
// links across the volume's edge fail, device nodes do not work, and
// the mount table names no host path.
func TestVolumeHostile(t *testing.T) {
	r := newRuntime(t)
	vol := newVolume(t, r, 16)
	sa, sb := testSpec(), testSpec()
	sa.IDs = image.IDMap{HostID: 1<<30 + 2*65536, Size: 65536}
	sb.IDs = image.IDMap{HostID: 1<<30 + 3*65536, Size: 65536}
	sa.Volumes = []VolumeMount{{ID: vol, Path: "/vol"}}
	sb.Volumes = []VolumeMount{{ID: vol, Path: "/vol"}}
	a, b := start(t, r, sa), start(t, r, sb)
	hostMark := filepath.Join(t.TempDir(), "host-mark")
	if err := os.WriteFile(hostMark, []byte("host"), 0o644); err != nil {
		t.Fatal(err)
	}
	mustSh(t, a, 0, "echo in-a > /mark && ln -s / /vol/root && ln -s ../../.. /vol/up && ln -s "+hostMark+" /vol/host && mkdir /vol/d && ln -s ../../../../mark /vol/d/up")
	mustSh(t, a, 1000, "ln -s / /vol/uroot")
	mustSh(t, b, 0, "echo in-b > /mark")
	for _, uid := range []int{0, 1000} {
		if out := mustSh(t, b, uid, "cat /vol/root/mark /vol/up/mark /vol/d/up /vol/uroot/mark"); out != "in-b\nin-b\nin-b\nin-b" {
			t.Errorf("a's symlinks followed in b as %d: %q", uid, out)
		}
		if out, exit := sh(t, b, uid, "cat /vol/host"); exit.ExitCode == 0 {
			t.Errorf("a symlink to a host path opens it in b as %d: %q", uid, out)
		}
	}
	// Hard links across the volume's edge, both ways.
	for _, c := range []struct {
		uid    int
		script string
	}{
		{0, "ln /etc/passwd /vol/pw"},
		{0, "ln /vol/root /tmp/l"},
		{0, "echo x > /vol/f && ln /vol/f /root/f"},
		{1000, "echo u > /tmp/u && ln /tmp/u /vol/u"},
		{1000, "echo u > /vol/fu && ln /vol/fu /tmp/fu"},
	} {
		if out, exit := sh(t, a, c.uid, c.script); exit.ExitCode == 0 || !strings.Contains(strings.ToLower(out), "cross-device") {
			t.Errorf("%q as %d: exit %d: %s", c.script, c.uid, exit.ExitCode, out)
		}
	}
	// A device node: not made, or unusable (nodev).
	for _, uid := range []int{0, 1000} {
		script := fmt.Sprintf("mknod /vol/null%d c 1 3 && echo x > /vol/null%d", uid, uid)
		out, exit := sh(t, a, uid, script)
		if exit.ExitCode == 0 {
			t.Errorf("a device node in the volume works for %d: %s", uid, out)
		}
		t.Logf("mknod as %d: %s", uid, out)
	}
	// The mount table: the volume's root is the filesystem's, and no host
	// path of the node is named.
	info := mustSh(t, a, 1000, "grep ' /vol ' /proc/self/mountinfo")
	fields := strings.Fields(info)
	if len(fields) < 6 || fields[3] != "/" {
		t.Fatalf("mountinfo of /vol: %q", info)
	}
	// A set-id file one sandbox's root leaves there is inert in the
	// others: the mount is nosuid (and nodev).
	if opts := strings.Split(fields[5], ","); !slices.Contains(opts, "nosuid") || !slices.Contains(opts, "nodev") {
		t.Errorf("the volume is mounted %s", fields[5])
	}
	for _, p := range []string{r.cfg.VolumeDir, r.cfg.StateDir} {
		if strings.Contains(info, p) {
			t.Errorf("mountinfo of /vol names %s: %q", p, info)
		}
	}
	// The source device is not in the sandbox's /dev.
	if len(fields) >= 9 {
		src := fields[len(fields)-2]
		if out, exit := sh(t, a, 0, "head -c 1 "+src+" >/dev/null"); exit.ExitCode == 0 {
			t.Errorf("the volume's device %s opens inside: %q", src, out)
		}
	}
	// Dropped with the symlinks in it, the host's files stay.
	for _, s := range []Spec{sa, sb} {
		if err := r.Destroy(t.Context(), s.ID); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.DropVolume(t.Context(), vol); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(hostMark); err != nil || string(b) != "host" {
		t.Errorf("host file after the drop: %q %v", b, err)
	}
	checkVolumeGone(t, r, vol)
}

func checkVolumeGone(t *testing.T, r *Runtime, vol string) {
	t.Helper()
	dir := r.volumeDir(vol)
	if _, err := os.Lstat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("volume dir %s: still there (%v)", dir, err)
	}
	if m, err := mountinfo.Under(dir); err != nil || len(m) > 0 {
		t.Errorf("mounts under %s: %v %v", dir, m, err)
	}
	if devs, err := loopsBackedBy(filepath.Join(dir, diskImage)); err != nil || len(devs) > 0 {
		t.Errorf("loop devices left: %v %v", devs, err)
	}
	if err := r.DropVolume(t.Context(), vol); err != nil {
		t.Errorf("second drop: %v", err)
	}
}

// TestVolumeLifecycle: a volume outlives its sandbox, a restart of the
// runtime, a stop (whose disk holds none of the volume's files) and a
// host mount that went (as after a reboot); the start after a stop
// mounts it again.
func TestVolumeLifecycle(t *testing.T) {
	r := newRuntime(t)
	vol := newVolume(t, r, 16)
	if err := r.CreateVolume(t.Context(), vol, 16); err != nil {
		t.Fatalf("create again: %v", err)
	}
	s := testSpec()
	s.Volumes = []VolumeMount{{ID: vol, Path: "/data/vol"}}
	c, err := r.Start(t.Context(), s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Destroy(context.Background(), s.ID) })
	mustSh(t, c, 1000, "echo kept > /data/vol/kept && head -c 100000 /dev/urandom > /data/vol/noise")
	c.Close()

	// A new Runtime over the same directories, as after kill -9 of cove.
	r2, err := New(r.Config(), r.log)
	if err != nil {
		t.Fatal(err)
	}
	c, err = r2.Attach(t.Context(), s.ID)
	if err != nil {
		t.Fatal(err)
	}
	if out := mustSh(t, c, 1000, "cat /data/vol/kept"); out != "kept" {
		t.Errorf("after attach: %q", out)
	}
	if err := r2.DropVolume(t.Context(), vol); api.ErrorCode(err) != api.CodePreconditionFailed {
		t.Errorf("drop after the restart: %v", err)
	}

	// A snapshot (Freeze) and a stop: the disk holds the mount point, not
	// the volume's files.
	volumeFilesIn := func(img string) []os.DirEntry {
		t.Helper()
		look := filepath.Join(t.TempDir(), "look")
		os.Mkdir(look, 0o700)
		if err := mountLoop(img, look, unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, false); err != nil {
			t.Fatal(err)
		}
		defer unmount(look)
		entries, err := os.ReadDir(filepath.Join(look, "upper/data/vol"))
		if err != nil {
			t.Fatalf("the disk's /data/vol: %v", err)
		}
		// The sandbox's own file beside the volume is there.
		if b, err := os.ReadFile(filepath.Join(look, "upper/data/own")); err != nil || string(b) != "own\n" {
			t.Errorf("the disk's /data/own: %q %v", b, err)
		}
		return entries
	}
	mustSh(t, c, 0, "echo own > /data/own && sync")
	c.Close()
	frozen := filepath.Join(t.TempDir(), "frozen.img")
	if _, err := r2.Freeze(t.Context(), s.ID, frozen); err != nil {
		t.Fatal(err)
	}
	if e := volumeFilesIn(frozen); len(e) != 0 {
		t.Errorf("the snapshot's /data/vol holds %v", e)
	}
	img, err := r2.Stop(t.Context(), s.ID)
	if err != nil {
		t.Fatal(err)
	}
	if e := volumeFilesIn(img); len(e) != 0 {
		t.Errorf("the stopped disk's /data/vol holds %v", e)
	}
	if users, err := r2.VolumeUsers(vol); err != nil || len(users) != 0 {
		t.Errorf("users after stop: %v %v", users, err)
	}
	// Woken from that disk.
	moved := filepath.Join(r2.cfg.StateDir, s.ID+".img")
	if err := os.Rename(img, moved); err != nil {
		t.Fatal(err)
	}
	if err := r2.Destroy(t.Context(), s.ID); err != nil {
		t.Fatal(err)
	}
	s.Disk = moved
	c = start(t, r2, s)
	if out := mustSh(t, c, 1000, "cat /data/vol/kept"); out != "kept" {
		t.Errorf("after the wake: %q", out)
	}
	c.Close()
	if err := r2.Destroy(t.Context(), s.ID); err != nil {
		t.Fatal(err)
	}

	// The host mount goes (a reboot): the next start mounts it again.
	if err := unmount(filepath.Join(r2.volumeDir(vol), "mnt")); err != nil {
		t.Fatal(err)
	}
	s2 := testSpec()
	s2.Volumes = []VolumeMount{{ID: vol, Path: "/v", ReadOnly: true}}
	c = start(t, r2, s2)
	if out := mustSh(t, c, 1000, "cat /v/kept"); out != "kept" {
		t.Errorf("after a remount: %q", out)
	}
	// The host mount goes while a sandbox holds a view: the volume is
	// mounted again from the same loop device, not a second one.
	if err := unmount(filepath.Join(r2.volumeDir(vol), "mnt")); err != nil {
		t.Fatal(err)
	}
	if _, err := r2.VolumeUsage(t.Context(), vol); err != nil {
		t.Fatal(err)
	}
	if devs, err := loopsBackedBy(filepath.Join(r2.volumeDir(vol), diskImage)); err != nil || len(devs) != 1 {
		t.Errorf("loop devices of the volume: %v %v", devs, err)
	}
	if users, err := r2.VolumeUsers(vol); err != nil || len(users) != 1 {
		t.Errorf("users after the remount: %v %v", users, err)
	}
	// A volume the node does not hold: the start fails and leaves nothing.
	s3 := testSpec()
	s3.Volumes = []VolumeMount{{ID: "vol_nosuch", Path: "/v"}}
	if _, err := r2.Start(t.Context(), s3); api.ErrorCode(err) != api.CodeNotFound {
		t.Errorf("start with a missing volume: %v", err)
	}
	checkGone(t, r2, s3.ID)
}

func TestVolumeMountValidate(t *testing.T) {
	for _, c := range []struct {
		v  VolumeMount
		ok bool
	}{
		{VolumeMount{ID: "vol_a", Path: "/data"}, true},
		{VolumeMount{ID: "vol_a", Path: "/a/b/c"}, true},
		{VolumeMount{ID: "vol_a", Path: "data"}, false},
		{VolumeMount{ID: "vol_a", Path: "/"}, false},
		{VolumeMount{ID: "vol_a", Path: "/a/../b"}, false},
		{VolumeMount{ID: "vol_a", Path: "/a/"}, false},
		{VolumeMount{ID: "vol_a", Path: "/proc/x"}, false},
		{VolumeMount{ID: "vol_a", Path: "/dev"}, false},
		{VolumeMount{ID: "vol_a", Path: "/sys/fs"}, false},
		{VolumeMount{ID: "../x", Path: "/data"}, false},
		{VolumeMount{ID: "", Path: "/data"}, false},
	} {
		if err := c.v.validate(); (err == nil) != c.ok {
			t.Errorf("%+v: %v", c.v, err)
		}
	}
}

// TestCreateVolumeBad: a bad id or size is refused, leaving nothing.
func TestCreateVolumeBad(t *testing.T) {
	r := newRuntime(t)
	for _, c := range []struct {
		id   string
		size int64
	}{{"../x", 16}, {"vol_small", 8}} {
		if err := r.CreateVolume(t.Context(), c.id, c.size); api.ErrorCode(err) != api.CodeInvalidArgument {
			t.Errorf("create %q %d: %v", c.id, c.size, err)
		}
	}
	if _, err := os.Stat(r.cfg.VolumeDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("volume dir made: %v", err)
	}
	if _, err := r.VolumeUsage(t.Context(), "vol_nosuch"); api.ErrorCode(err) != api.CodeNotFound {
		t.Errorf("usage of a missing volume: %v", err)
	}
}

// TestVolumePathSymlink: a sandbox that turned its volume's mount point
// into a symlink (to a host path, out of its root, into /proc) before a
// wake gets the volume mounted inside its own root filesystem, where the
// link leads there, or not at all: runc resolves the path in the
// sandbox's root and refuses a place in /proc.
func TestVolumePathSymlink(t *testing.T) {
	r := newRuntime(t)
	vol := newVolume(t, r, 16)
	for _, c := range []struct{ target, seen string }{
		{r.cfg.VolumeDir, r.cfg.VolumeDir},
		{"../../../../etc", "/etc"},
		{"/proc/sys", ""},
	} {
		t.Run(strings.ReplaceAll(c.target, "/", "_"), func(t *testing.T) {
			s := testSpec()
			cl := start(t, r, s)
			mustSh(t, cl, 0, "ln -s "+c.target+" /data")
			cl.Close()
			img, err := r.Stop(t.Context(), s.ID)
			if err != nil {
				t.Fatal(err)
			}
			moved := filepath.Join(r.cfg.StateDir, s.ID+".img")
			if err := os.Rename(img, moved); err != nil {
				t.Fatal(err)
			}
			if err := r.Destroy(t.Context(), s.ID); err != nil {
				t.Fatal(err)
			}
			s.Disk = moved
			s.Volumes = []VolumeMount{{ID: vol, Path: "/data"}}
			cl, err = r.Start(t.Context(), s)
			if c.seen == "" {
				if err == nil || !strings.Contains(err.Error(), "inside /proc") {
					t.Fatalf("start with the mount point linked into /proc: %v", err)
				}
				checkGone(t, r, s.ID)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			mustSh(t, cl, 0, "echo x > /data/probe")
			if out := mustSh(t, cl, 0, "cat "+c.seen+"/probe"); out != "x" {
				t.Errorf("the volume inside at %s: %q", c.seen, out)
			}
			if _, err := os.Lstat(filepath.Join(r.cfg.VolumeDir, "probe")); err == nil {
				t.Errorf("the probe landed in the host's %s", r.cfg.VolumeDir)
			}
			if _, err := os.Lstat("/etc/probe"); err == nil {
				t.Errorf("the probe landed in the host's /etc")
			}
			mustSh(t, cl, 0, "rm /data/probe")
		})
	}
}
