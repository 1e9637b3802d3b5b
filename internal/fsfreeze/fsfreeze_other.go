//go:build !linux

package fsfreeze

import "errors"

var errLinux = errors.New("filesystems are frozen on Linux only")

// Do fails: filesystems are frozen on Linux only.
func Do(mnt string, fn func() error) error { return errLinux }

// Thaw fails: filesystems are frozen on Linux only.
func Thaw(mnt string) error { return errLinux }

// Freeze fails: filesystems are frozen on Linux only.
func Freeze(mnt string) error { return errLinux }
