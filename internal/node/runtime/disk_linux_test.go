package runtime

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestLoopRecord: an image's loop devices are found through its record,
// which passes over names not backed by the image (stale, another
// image's, or garbage); without a record every device is looked at; once
// unmounted, the device clears itself and none is reported.
func TestLoopRecord(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (mkfs, loop devices, mounts)")
	}
	dir := t.TempDir()
	img, other := filepath.Join(dir, "a.img"), filepath.Join(dir, "b.img")
	for _, p := range []string{img, other} {
		if err := makeDisk(t.Context(), p, 16, 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	mntA, mntB := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	for _, m := range []string{mntA, mntB} {
		if err := os.Mkdir(m, 0o700); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unmount(m) })
	}
	if err := mountLoop(img, mntA, unix.MS_NOSUID|unix.MS_NODEV, false); err != nil {
		t.Fatal(err)
	}
	if err := mountLoop(other, mntB, unix.MS_NOSUID|unix.MS_NODEV, false); err != nil {
		t.Fatal(err)
	}
	devs, err := loopsBackedBy(img)
	if err != nil || len(devs) != 1 {
		t.Fatalf("loops of a mounted image: %v %v", devs, err)
	}
	otherDevs, err := loopsBackedBy(other)
	if err != nil || len(otherDevs) != 1 || otherDevs[0] == devs[0] {
		t.Fatalf("loops of the other image: %v %v (first: %v)", otherDevs, err, devs)
	}
	rec, err := os.ReadFile(loopRecord(img))
	if err != nil || strings.TrimSpace(string(rec)) != filepath.Base(devs[0]) {
		t.Fatalf("record: %q %v; want %s", rec, err, filepath.Base(devs[0]))
	}

	// The other image's device, a device that is not attached, and
	// garbage in the record: only the image's own device is reported.
	junk := filepath.Base(otherDevs[0]) + "\nloop99999\n../../etc\nloopx\n" + string(rec)
	if err := os.WriteFile(loopRecord(img), []byte(junk), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := loopsBackedBy(img); err != nil || !slices.Equal(got, devs) {
		t.Fatalf("loops with a stale record: %v %v; want %v", got, err, devs)
	}

	// A device attached without a record (as by an older version) is
	// found by looking at every device.
	os.Remove(loopRecord(other))
	if got, err := loopsBackedBy(other); err != nil || !slices.Equal(got, otherDevs) {
		t.Fatalf("loops without a record: %v %v; want %v", got, err, otherDevs)
	}

	if err := unmount(mntA); err != nil {
		t.Fatal(err)
	}
	if got, err := loopsBackedBy(img); err != nil || len(got) != 0 {
		t.Fatalf("loops after unmount: %v %v", got, err)
	}
	if out, err := exec.Command("losetup", "-j", img).CombinedOutput(); err != nil || len(strings.TrimSpace(string(out))) != 0 {
		t.Fatalf("losetup -j after unmount: %q %v", out, err)
	}
}

// TestStateDirKeepsDiskToTheLast: removing a state dir that fails part
// way leaves its disk image, so a sleep cut short there is finished by
// saving the image again.
func TestStateDirKeepsDiskToTheLast(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (chattr)")
	}
	dir := filepath.Join(t.TempDir(), "sbx")
	stuck := filepath.Join(dir, "a", "stuck")
	if err := os.MkdirAll(filepath.Dir(stuck), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Join(dir, diskImage), stuck, filepath.Join(dir, "z")} {
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := exec.Command("chattr", "+i", stuck).CombinedOutput(); err != nil {
		t.Skipf("chattr +i: %v %s", err, out)
	}
	defer exec.Command("chattr", "-i", stuck).Run()
	if err := removeStateDir(dir); err == nil {
		t.Fatal("removing a dir holding an immutable file succeeded")
	}
	if _, err := os.Stat(filepath.Join(dir, diskImage)); err != nil {
		t.Fatalf("the disk image went before the rest: %v", err)
	}
	exec.Command("chattr", "-i", stuck).Run()
	if err := removeStateDir(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("state dir left: %v", err)
	}
}

// TestLoopDirectIO: a sandbox's disk is attached with direct I/O (the
// kernel says so in sysfs), other images without; what is written and
// synced through a direct device is in the image when it is mounted
// again.
func TestLoopDirectIO(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (mkfs, loop devices, mounts)")
	}
	dir := t.TempDir()
	data := make([]byte, 9<<20+123)
	for i := range data {
		data[i] = byte(i*7 + i>>12)
	}
	for _, direct := range []bool{true, false} {
		img := filepath.Join(dir, fmt.Sprintf("%v.img", direct))
		mnt := filepath.Join(dir, fmt.Sprintf("%v", direct))
		if err := makeDisk(t.Context(), img, 32, 0, 0); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(mnt, 0o700); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unmount(mnt) })
		if err := mountLoop(img, mnt, unix.MS_NOSUID|unix.MS_NODEV, direct); err != nil {
			t.Fatal(err)
		}
		devs, err := loopsBackedBy(img)
		if err != nil || len(devs) != 1 {
			t.Fatalf("loops of %s: %v %v", img, devs, err)
		}
		dio, err := os.ReadFile(filepath.Join("/sys/block", filepath.Base(devs[0]), "loop", "dio"))
		want := map[bool]string{true: "1", false: "0"}[direct]
		if err != nil || strings.TrimSpace(string(dio)) != want {
			t.Fatalf("direct=%v: %s dio = %q %v; want %s", direct, devs[0], dio, err, want)
		}
		f, err := os.Create(filepath.Join(mnt, "f"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write(data); err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		f.Close()
		if err := unmount(mnt); err != nil {
			t.Fatal(err)
		}
		if err := mountLoop(img, mnt, unix.MS_NOSUID|unix.MS_NODEV, false); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(mnt, "f"))
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("direct=%v: read back %d bytes (%v), want %d", direct, len(got), err, len(data))
		}
		if err := unmount(mnt); err != nil {
			t.Fatal(err)
		}
	}
}

// TestLoopRecordStaysShort: a file attached again and again (a volume at
// every start of its node) keeps a record of the devices that hold it
// now, not one line per attach; a device that still holds it stays named.
func TestLoopRecordStaysShort(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (mkfs, loop devices, mounts)")
	}
	dir := t.TempDir()
	img := filepath.Join(dir, "v.img")
	if err := makeDisk(t.Context(), img, 16, 0, 0); err != nil {
		t.Fatal(err)
	}
	mnt, again := filepath.Join(dir, "m"), filepath.Join(dir, "m2")
	for _, m := range []string{mnt, again} {
		if err := os.Mkdir(m, 0o700); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unmount(m) })
	}
	for range 5 {
		if err := mountLoop(img, mnt, unix.MS_NOSUID|unix.MS_NODEV, false); err != nil {
			t.Fatal(err)
		}
		if err := unmount(mnt); err != nil {
			t.Fatal(err)
		}
	}
	if rec, err := os.ReadFile(loopRecord(img)); err != nil || len(strings.Fields(string(rec))) != 1 {
		t.Fatalf("record after five attaches, one at a time: %q %v; want one device", rec, err)
	}
	// Two attached at once: both named; the next attach keeps them.
	if err := mountLoop(img, mnt, unix.MS_NOSUID|unix.MS_NODEV|unix.MS_RDONLY, false); err != nil {
		t.Fatal(err)
	}
	if err := mountLoop(img, again, unix.MS_NOSUID|unix.MS_NODEV|unix.MS_RDONLY, false); err != nil {
		t.Fatal(err)
	}
	held, err := loopsBackedBy(img)
	if err != nil || len(held) != 2 {
		t.Fatalf("devices holding the image: %v %v; want 2", held, err)
	}
	names, _, err := recordedLoops(img)
	if err != nil || len(names) != 2 {
		t.Fatalf("record with two attached: %v %v", names, err)
	}
	for _, m := range []string{mnt, again} {
		if err := unmount(m); err != nil {
			t.Fatal(err)
		}
	}
}
