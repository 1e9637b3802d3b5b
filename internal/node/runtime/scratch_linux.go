package runtime

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Scratch is a filesystem of a fixed size for work done on the node apart
// from any sandbox (a git clone): a sparse ext4 image in a directory of
// root's, mounted through a loop device nosuid, nodev and noexec. What is
// written there takes the node's disk as it is written, never more than
// the image's size: a full scratch fails its writer with ENOSPC.
type Scratch struct {
	dir string
	// Root is the mounted filesystem's root, owned by the uid and gid it
	// was made for, mode 0700.
	Root string
}

// MakeScratch makes a Scratch of sizeBytes (rounded up to whole MiB, at
// least MinDiskMiB) under dir, a directory that must not exist yet, whose
// root belongs to uid:gid. Close removes it.
func MakeScratch(ctx context.Context, dir string, sizeBytes int64, uid, gid uint32) (_ *Scratch, err error) {
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, err
	}
	s := &Scratch{dir: dir, Root: filepath.Join(dir, "root")}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	img := filepath.Join(dir, diskImage)
	if err := makeDisk(ctx, img, max((sizeBytes+1<<20-1)>>20, MinDiskMiB), uid, gid); err != nil {
		return nil, fmt.Errorf("make scratch disk: %w", err)
	}
	if err := os.Mkdir(s.Root, 0o700); err != nil {
		return nil, err
	}
	if err := mountLoop(img, s.Root, unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC|unix.MS_NOATIME, false); err != nil {
		return nil, fmt.Errorf("mount scratch disk: %w", err)
	}
	// mkfs made the root 0755; only its owner may look in.
	if err := os.Chmod(s.Root, 0o700); err != nil {
		return nil, err
	}
	return s, nil
}

// Full reports whether the scratch has no room left for data or for
// another file.
func (s *Scratch) Full() bool {
	var st unix.Statfs_t
	if err := unix.Statfs(s.Root, &st); err != nil {
		return false
	}
	return int64(st.Bavail)*st.Bsize < 1<<20 || st.Ffree == 0
}

// RemoveScratch removes the scratch MakeScratch made in dir, mounted or
// not (what a crash left).
func RemoveScratch(dir string) error {
	return (&Scratch{dir: dir, Root: filepath.Join(dir, "root")}).Close()
}

// Close unmounts the scratch and removes it with everything on it.
func (s *Scratch) Close() error {
	img := filepath.Join(s.dir, diskImage)
	errs := []error{unmount(s.Root), detachLoops(img)}
	errs = append(errs, os.RemoveAll(s.dir))
	return errors.Join(errs...)
}
