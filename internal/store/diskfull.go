package store

import (
	"errors"
	"syscall"
)

// sqliteFull is SQLite's result code SQLITE_FULL: a write found no room
// on the database's disk.
const sqliteFull = 13

// DiskFull reports whether err is a write that found its disk full: the
// kernel's ENOSPC, from a file of the data dir or under a database driver,
// or SQLite's SQLITE_FULL (the database file, on the data disk by
// default, could not grow). Such a call may succeed once room is freed.
func DiskFull(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, syscall.ENOSPC) {
		return true
	}
	// SQLite's errors carry its result code; the low byte is the primary
	// code, the rest an extended code's detail.
	var coded interface{ Code() int }
	return errors.As(err, &coded) && coded.Code()&0xff == sqliteFull
}
