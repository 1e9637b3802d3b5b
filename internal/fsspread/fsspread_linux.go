// Package fsspread asks the filesystem to spread the directories made in a
// directory over its disk, as it does those at its root.
//
// The node keeps a directory per sandbox (its state, its recorded output,
// runc's record of it). ext4 puts a new directory near its parent, and a
// file in the block group of its directory; on ext4 without a journal, a
// new file's inode is looked for past every inode of that group freed in
// the last minutes, one by one. Where sandboxes come and go, each new
// file then cost a millisecond of CPU or more, against some 20 µs. With
// the parent marked as the top of a hierarchy (FS_TOPDIR_FL, `chattr
// +T`), each new sandbox's directory goes to a group of few directories,
// and its files are made there.
package fsspread

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// topdirFlag is FS_TOPDIR_FL of linux/fs.h.
const topdirFlag = 0x00020000

// ErrUnsupported is Subdirs' error on a filesystem that keeps no such
// mark (the placement of directories is then its own).
var ErrUnsupported = errors.New("the filesystem does not take FS_TOPDIR_FL")

// Subdirs marks dir so that the directories made in it from now on are
// spread over the filesystem.
func Subdirs(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("spread the directories of %s: %w", dir, err)
	}
	defer f.Close()
	fd := int(f.Fd())
	flags, err := unix.IoctlGetInt(fd, unix.FS_IOC_GETFLAGS)
	if err == nil && flags&topdirFlag != 0 {
		return nil
	}
	if err == nil {
		err = unix.IoctlSetPointerInt(fd, unix.FS_IOC_SETFLAGS, flags|topdirFlag)
	}
	if errors.Is(err, unix.ENOTTY) || errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("spread the directories of %s: %w", dir, ErrUnsupported)
	}
	if err != nil {
		return fmt.Errorf("spread the directories of %s: %w", dir, err)
	}
	return nil
}

// Spread reports whether dir is marked.
func Spread(dir string) (bool, error) {
	f, err := os.Open(dir)
	if err != nil {
		return false, err
	}
	defer f.Close()
	flags, err := unix.IoctlGetInt(int(f.Fd()), unix.FS_IOC_GETFLAGS)
	if err != nil {
		return false, err
	}
	return flags&topdirFlag != 0, nil
}
