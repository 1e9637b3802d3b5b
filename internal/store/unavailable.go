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
	var ne net.Error
	if errors.As(err, &ne) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, io.ErrUnexpectedEOF) {
		return true
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
