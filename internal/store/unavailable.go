package store

import (
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
)

// Unavailable reports whether err is the store (or the network to it)
// being away for now rather than a fault of the request: a connection
// refused, reset or cut, a database shutting down or restarting. Such a
// failure is worth a retry, and the API answers it as unavailable.
func Unavailable(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	// A bare errno satisfies net.Error too (it has Timeout and Temporary):
	// only an error of the network (a *net.OpError, a DNS error, a
	// deadline) counts, not a file's ENOSPC or EACCES.
	var ne net.Error
	if errors.As(err, &ne) {
		if _, errno := ne.(syscall.Errno); !errno {
			return true
		}
	}
	// A database driver's error that says a retry is safe (the request
	// never reached the server), or a SQLSTATE of class 08 (connection
	// exception) or 57P (operator intervention: shutdown, restart).
	var retry interface{ SafeToRetry() bool }
	if errors.As(err, &retry) && retry.SafeToRetry() {
		return true
	}
	var coded interface{ SQLState() string }
	if errors.As(err, &coded) {
		s := coded.SQLState()
		return strings.HasPrefix(s, "08") || strings.HasPrefix(s, "57P")
	}
	return false
}
