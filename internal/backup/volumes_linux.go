package backup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/cove-dev/cove/internal/fsfreeze"
	"github.com/cove-dev/cove/internal/mountinfo"
)

// dataRange finds the next range of f at or after off that holds data:
// [start, end). start is size when only a hole is left.
func dataRange(f *os.File, off, size int64) (int64, int64, error) {
	fd := int(f.Fd())
	start, err := unix.Seek(fd, off, unix.SEEK_DATA)
	if errors.Is(err, unix.ENXIO) {
		return size, size, nil
	}
	if err != nil {
		// A file system without SEEK_DATA: all of it is data.
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EOPNOTSUPP) {
			return off, size, nil
		}
		return 0, 0, err
	}
	end, err := unix.Seek(fd, start, unix.SEEK_HOLE)
	if err != nil {
		return 0, 0, err
	}
	return start, min(end, size), nil
}

// withFrozen runs fn with the file system mounted at mnt frozen, when
// one is mounted there: its dirty data is written out first, and writes
// wait until it is thawed, after fn.
func withFrozen(mnt string, fn func() error) error {
	mounted, err := mountinfo.Under(mnt)
	if err != nil {
		return err
	}
	real := mnt
	if r, err := filepath.EvalSymlinks(mnt); err == nil {
		real = r
	}
	at := false
	for _, m := range mounted {
		at = at || m == real
	}
	if !at {
		return fn()
	}
	err = fsfreeze.Do(mnt, fn)
	if errors.Is(err, fsfreeze.ErrFrozen) {
		return fmt.Errorf("%s is frozen already (another backup runs?; fsfreeze -u %s thaws it)", mnt, mnt)
	}
	return err
}
