package fsfreeze

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// FIFREEZE and FITHAW (linux/fs.h) are _IOWR('X', 119, int) and
// _IOWR('X', 120, int) in the generic ioctl encoding (amd64, arm64 and
// most others); golang.org/x/sys/unix does not define them.
const (
	fiFreeze = 0xC0045877
	fiThaw   = 0xC0045878
)

// Do freezes the filesystem mounted at mnt, runs fn and thaws it: also
// when fn fails or panics. A freeze that fails runs nothing; one of a
// filesystem frozen already fails with ErrFrozen. A thaw that fails is
// joined to fn's error.
func Do(mnt string, fn func() error) (err error) {
	d, err := freeze(mnt)
	if err != nil {
		return err
	}
	defer d.Close()
	defer func() {
		if terr := unix.IoctlSetInt(int(d.Fd()), fiThaw, 0); terr != nil {
			err = errors.Join(err, fmt.Errorf("thaw %s: FITHAW: %w (fsfreeze -u %s thaws it)", mnt, terr, mnt))
		}
	}()
	return fn()
}

// Freeze freezes the filesystem mounted at mnt until Thaw (Do is the
// form that cannot forget to thaw). One frozen already fails with
// ErrFrozen.
func Freeze(mnt string) error {
	d, err := freeze(mnt)
	if err != nil {
		return err
	}
	return d.Close()
}

// freeze freezes the filesystem mounted at mnt and returns mnt open, to
// thaw it through.
func freeze(mnt string) (*os.File, error) {
	d, err := os.Open(mnt)
	if err != nil {
		return nil, fmt.Errorf("freeze %s: %w", mnt, err)
	}
	if err := unix.IoctlSetInt(int(d.Fd()), fiFreeze, 0); err != nil {
		d.Close()
		if errors.Is(err, unix.EBUSY) {
			err = ErrFrozen
		}
		return nil, fmt.Errorf("freeze %s: FIFREEZE: %w", mnt, err)
	}
	return d, nil
}

// Thaw thaws the filesystem mounted at mnt. One not frozen refuses
// (EINVAL).
func Thaw(mnt string) error {
	d, err := os.Open(mnt)
	if err != nil {
		return fmt.Errorf("thaw %s: %w", mnt, err)
	}
	defer d.Close()
	if err := unix.IoctlSetInt(int(d.Fd()), fiThaw, 0); err != nil {
		return fmt.Errorf("thaw %s: FITHAW: %w", mnt, err)
	}
	return nil
}
