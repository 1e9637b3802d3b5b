package runtime

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// A new sandbox's disk is a copy of an empty one made once per size:
// mkfs.ext4 is a process of its own whose run took 30 to 180 ms of a
// start on a busy host, where copying the few megabytes of metadata of a
// sparse image takes about one. The empty disks are kept beside the state
// directory, <EmptyDiskDir>/<MiB>.img, made whole under a temporary name
// and renamed, so a crash leaves either none or a whole one. Their root
// directory belongs to host root; the copy's is given to the sandbox's
// mapped root once mounted (what mkfs's root_owner did).

// emptyDiskPath is where the empty disk of sizeMiB is kept.
func (r *Runtime) emptyDiskPath(sizeMiB int64) string {
	return filepath.Join(r.cfg.EmptyDiskDir, strconv.FormatInt(sizeMiB, 10)+".img")
}

// maxEmptyDisks bounds how many sizes have an empty disk kept: the sizes
// are the tenants' to choose, and each kept disk takes a few megabytes.
// Past it, a disk of another size is made by mkfs.ext4 itself.
const maxEmptyDisks = 8

// newDisk makes path a fresh disk of sizeMiB whose root belongs to host
// root: a sparse copy of the empty disk of that size, made first if
// there is none.
func (r *Runtime) newDisk(ctx context.Context, path string, sizeMiB int64) error {
	empty := r.emptyDiskPath(sizeMiB)
	if _, err := os.Stat(empty); err != nil {
		kept, err := r.makeEmptyDisk(ctx, empty, sizeMiB)
		if err != nil {
			return err
		}
		if !kept {
			return makeDisk(ctx, path, sizeMiB, 0, 0)
		}
	}
	return copySparse(empty, path)
}

// makeEmptyDisk makes the empty disk at path, once at a time; kept is
// false when there are as many as are kept already.
func (r *Runtime) makeEmptyDisk(ctx context.Context, path string, sizeMiB int64) (kept bool, err error) {
	r.emptyMu.Lock()
	defer r.emptyMu.Unlock()
	if _, err := os.Stat(path); err == nil {
		return true, nil // made meanwhile
	}
	if have, _ := filepath.Glob(filepath.Join(r.cfg.EmptyDiskDir, "*.img")); len(have) >= maxEmptyDisks {
		return false, nil
	}
	if err := os.MkdirAll(r.cfg.EmptyDiskDir, 0o700); err != nil {
		return false, err
	}
	tmp := path + ".tmp"
	os.Remove(tmp) // a crash's leftover
	if err := makeDisk(ctx, tmp, sizeMiB, 0, 0); err != nil {
		os.Remove(tmp)
		return false, err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return false, err
	}
	return true, nil
}

// copySparse copies the sparse file src to the new file dst, its data
// only: the holes stay holes.
func copySparse(src, dst string) (err error) {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			os.Remove(dst)
		}
	}()
	if err := out.Truncate(st.Size()); err != nil {
		return err
	}
	// A filesystem that shares blocks copies nothing at all.
	if unix.IoctlFileClone(int(out.Fd()), int(in.Fd())) == nil {
		return nil
	}
	if _, err := copyExtents(context.Background(), in, out, st.Size()); err != nil {
		return fmt.Errorf("copy %s: %w", src, err)
	}
	return nil
}
