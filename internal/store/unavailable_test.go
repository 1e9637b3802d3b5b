package store

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"syscall"
	"testing"
)

type sqlState string

func (s sqlState) Error() string    { return "sqlstate " + string(s) }
func (s sqlState) SQLState() string { return string(s) }

type safe bool

func (s safe) Error() string     { return "driver" }
func (s safe) SafeToRetry() bool { return bool(s) }

func TestUnavailable(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{errors.New("boom"), false},
		{fmt.Errorf("get team: %w", &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}), true},
		{fmt.Errorf("list: %w", syscall.ECONNRESET), true},
		{fmt.Errorf("scan: %w", io.ErrUnexpectedEOF), true},
		{fmt.Errorf("q: %w", sqlState("57P01")), true}, // admin_shutdown
		{fmt.Errorf("q: %w", sqlState("08006")), true}, // connection_failure
		{fmt.Errorf("q: %w", sqlState("23505")), false},
		{fmt.Errorf("q: %w", safe(true)), true},
		{fmt.Errorf("q: %w", safe(false)), false},
		// A file's errno is no network error, though it has Timeout and
		// Temporary as net.Error does.
		{fmt.Errorf("create output dir: %w", &fs.PathError{Op: "mkdir", Path: "/d", Err: syscall.ENOSPC}), false},
		{fmt.Errorf("open: %w", syscall.EACCES), false},
		{fmt.Errorf("read: %w", &net.OpError{Op: "read", Err: syscall.EHOSTUNREACH}), true},
	} {
		if got := Unavailable(tc.err); got != tc.want {
			t.Errorf("Unavailable(%v) = %v; want %v", tc.err, got, tc.want)
		}
	}
}

type sqliteCode int

func (c sqliteCode) Error() string { return "sqlite" }
func (c sqliteCode) Code() int     { return int(c) }

func TestDiskFull(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{errors.New("boom"), false},
		{fmt.Errorf("create output dir: %w", &fs.PathError{Op: "mkdir", Path: "/d", Err: syscall.ENOSPC}), true},
		{fmt.Errorf("write: %w", syscall.EIO), false},
		{fmt.Errorf("claim: %w", sqliteCode(13)), true},    // SQLITE_FULL
		{fmt.Errorf("claim: %w", sqliteCode(2067)), false}, // SQLITE_CONSTRAINT_UNIQUE
		{fmt.Errorf("claim: %w", sqliteCode(5)), false},    // SQLITE_BUSY
	} {
		if got := DiskFull(tc.err); got != tc.want {
			t.Errorf("DiskFull(%v) = %v; want %v", tc.err, got, tc.want)
		}
	}
}
