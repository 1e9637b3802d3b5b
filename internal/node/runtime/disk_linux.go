package runtime

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// makeDisk creates path as a sparse file of sizeMiB holding an empty ext4
// whose root directory belongs to uid:gid. No blocks are reserved for host
// root: the sandbox gets all of its quota.
func makeDisk(ctx context.Context, path string, sizeMiB int64, uid, gid uint32) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	err = f.Truncate(sizeMiB << 20)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, "mkfs.ext4", "-q", "-F", "-m", "0",
		"-E", fmt.Sprintf("root_owner=%d:%d,lazy_itable_init=1,lazy_journal_init=1", uid, gid),
		path)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("mkfs.ext4: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// mountLoop mounts the ext4 image file at target through a free loop
// device set to clear itself: the device is detached by the kernel as soon
// as target is unmounted, and at once if the mount fails. With direct, the
// device reads and writes its file with direct I/O where the file's
// filesystem allows it (else as before, through the host's page cache):
// the ext4 inside caches the pages already, so they are not copied and
// held a second time, and an fsync inside writes to the disk at once
// rather than first to the file's page cache and then, all of it, to the
// disk.
func mountLoop(file, target string, flags uintptr, direct bool) error {
	backing, err := os.OpenFile(file, os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer backing.Close()
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer ctl.Close()

	var cfg unix.LoopConfig
	cfg.Fd = uint32(backing.Fd())
	cfg.Info.Flags = unix.LO_FLAGS_AUTOCLEAR
	copy(cfg.Info.File_name[:len(cfg.Info.File_name)-1], file)
	cfgBuffered := cfg
	if direct {
		cfg.Info.Flags |= unix.LO_FLAGS_DIRECT_IO
	}
	// Another process may take the free device between GET_FREE and
	// CONFIGURE: then we ask again.
	for range 20 {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return fmt.Errorf("get free loop device: %w", err)
		}
		dev := "/dev/loop" + strconv.Itoa(n)
		// Recorded before it is configured: a crash in between leaves at
		// most a name that the backing file's check passes over.
		if err := recordLoop(file, n); err != nil {
			return err
		}
		loop, err := os.OpenFile(dev, os.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		err = unix.IoctlLoopConfigure(int(loop.Fd()), &cfg)
		if direct && errors.Is(err, unix.EINVAL) {
			// The file's filesystem takes no direct I/O.
			err = unix.IoctlLoopConfigure(int(loop.Fd()), &cfgBuffered)
		}
		if errors.Is(err, unix.EBUSY) {
			loop.Close()
			continue
		}
		if err != nil {
			loop.Close()
			return fmt.Errorf("configure %s: %w", dev, err)
		}
		err = unix.Mount(dev, target, "ext4", flags, "")
		// The mount holds the device now; closing our descriptor lets
		// autoclear act when it goes (or now, if the mount failed).
		loop.Close()
		if err != nil {
			return fmt.Errorf("mount %s on %s: %w", dev, target, err)
		}
		return nil
	}
	return errors.New("no free loop device after 20 tries")
}

// detachLoops detaches any loop device still backed by file: normally
// none, as devices clear themselves on unmount.
func detachLoops(file string) error {
	devs, err := loopsBackedBy(file)
	if err != nil {
		return err
	}
	var errs []error
	for _, dev := range devs {
		f, err := os.OpenFile(dev, os.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
			continue
		}
		err = unix.IoctlSetInt(int(f.Fd()), unix.LOOP_CLR_FD, 0)
		f.Close()
		if err != nil && !errors.Is(err, unix.ENXIO) {
			errs = append(errs, fmt.Errorf("detach %s: %w", dev, err))
		}
	}
	return errors.Join(errs...)
}

// loopRecord is the file beside an image that names the loop devices it
// was attached to, one per line. Finding an image's devices reads only
// those: a scan of every loop device reads one sysfs file per device, and
// a host holding 2,000 sandboxes has as many (a quarter of a second each
// time on a busy host, and a sleep looked three times).
func loopRecord(file string) string { return file + ".loops" }

// recordLoop adds loop device n to file's record. A record that names
// devices already is written anew with those of them that still hold
// file, under a temporary name and renamed over it: a file attached again
// and again (a volume at every start of its node) keeps a short record,
// and a crash leaves the old record or the new one, both naming every
// device that holds file.
func recordLoop(file string, n int) error {
	name := "loop" + strconv.Itoa(n)
	names, _, err := recordedLoops(file)
	if err != nil {
		return fmt.Errorf("record loop device: %w", err)
	}
	keep := []string{}
	for _, dev := range devicesBacking(file, backingPaths(names)) {
		if d := filepath.Base(dev); d != name {
			keep = append(keep, d)
		}
	}
	keep = append(keep, name)
	tmp := loopRecord(file) + ".tmp"
	if err := os.WriteFile(tmp, []byte(strings.Join(keep, "\n")+"\n"), 0o600); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("record loop device: %w", err)
	}
	if err := os.Rename(tmp, loopRecord(file)); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("record loop device: %w", err)
	}
	return nil
}

// recordedLoops returns the devices file's record names, each once; ok is
// false when there is no record (an image attached by an older version).
func recordedLoops(file string) (names []string, ok bool, err error) {
	b, err := os.ReadFile(loopRecord(file))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("read loop record: %w", err)
	}
	seen := map[string]bool{}
	for _, name := range strings.Fields(string(b)) {
		if _, err := strconv.ParseUint(strings.TrimPrefix(name, "loop"), 10, 32); err != nil || !strings.HasPrefix(name, "loop") || seen[name] {
			continue
		}
		seen[name] = true
		names = append(names, name)
	}
	return names, true, nil
}

// loopsBackedBy lists the loop devices whose backing file is file: those
// of its record that still are, or, without a record, any on the host.
func loopsBackedBy(file string) ([]string, error) {
	names, ok, err := recordedLoops(file)
	if err != nil {
		return nil, err
	}
	paths := backingPaths(names)
	if !ok {
		if paths, err = filepath.Glob("/sys/block/loop*/loop/backing_file"); err != nil {
			return nil, err
		}
	}
	return devicesBacking(file, paths), nil
}

// backingPaths are the sysfs files naming the backing file of the loop
// devices named.
func backingPaths(names []string) []string {
	var paths []string
	for _, name := range names {
		paths = append(paths, filepath.Join("/sys/block", name, "loop", "backing_file"))
	}
	return paths
}

// devicesBacking returns the devices, of those whose backing_file paths
// are given, that file backs now.
func devicesBacking(file string, paths []string) []string {
	var devs []string
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // not attached, or detached meanwhile
		}
		backing := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), " (deleted)")
		if backing == file {
			devs = append(devs, "/dev/"+filepath.Base(filepath.Dir(filepath.Dir(p))))
		}
	}
	return devs
}

// unmount unmounts target, lazily if it is busy; a target that is not a
// mount point, or does not exist, is fine.
func unmount(target string) error {
	for {
		err := unix.Unmount(target, unix.UMOUNT_NOFOLLOW)
		switch {
		case err == nil:
			continue // stacked mounts: until none is left
		case errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOENT):
			return nil
		case errors.Is(err, unix.EBUSY):
			if err := unix.Unmount(target, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW); err != nil && !errors.Is(err, unix.EINVAL) {
				return fmt.Errorf("unmount %s: %w", target, err)
			}
			return nil
		case errors.Is(err, unix.EINTR):
			continue
		default:
			return fmt.Errorf("unmount %s: %w", target, err)
		}
	}
}
