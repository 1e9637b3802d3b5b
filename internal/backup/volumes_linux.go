package backup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/cove-dev/cove/internal/mountinfo"
)

// FIFREEZE and FITHAW are _IOWR('X', 119, int) and _IOWR('X', 120, int)
// in the generic ioctl encoding (amd64, arm64 and most others).
const (
	fiFreeze = 0xC0045877
	fiThaw   = 0xC0045878
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
func withFrozen(mnt string, fn func() error) (err error) {
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
	d, err := os.Open(mnt)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := unix.IoctlSetInt(int(d.Fd()), fiFreeze, 0); err != nil {
		if errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("%s is frozen already (another backup runs?; fsfreeze -u %s thaws it)", mnt, mnt)
		}
		return fmt.Errorf("freeze %s: %w", mnt, err)
	}
	defer func() {
		if terr := unix.IoctlSetInt(int(d.Fd()), fiThaw, 0); terr != nil && err == nil {
			err = fmt.Errorf("thaw %s: %w (fsfreeze -u %s)", mnt, terr, mnt)
		}
	}()
	return fn()
}
