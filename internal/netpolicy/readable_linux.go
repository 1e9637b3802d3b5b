package netpolicy

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// awaitReadable waits, without a buffer, until c has bytes to read, has
// ended or has failed (the read that follows tells which), or its read
// deadline passes or it is closed (the error). A connection without a
// socket of its own is ready at once.
func awaitReadable(c net.Conn) error {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	var b [1]byte
	return raw.Read(func(fd uintptr) bool {
		for {
			_, _, err := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
			switch err {
			case unix.EINTR:
				continue
			case unix.EAGAIN:
				return false // wait for the poller
			}
			return true
		}
	})
}
