package netpolicy

import (
	"net"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// awaitReadable waits, without a buffer, until c has bytes to read or has
// ended (the read that follows tells which). It returns the socket's error
// (a reset: the peek consumes it, so the read that follows would see a
// mere end), or the error of a read deadline passed or of c closed. A
// connection without a socket of its own is ready at once.
func awaitReadable(c net.Conn) error {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	var (
		b       [1]byte
		sockErr error
	)
	err = raw.Read(func(fd uintptr) bool {
		for {
			_, _, err := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
			switch err {
			case unix.EINTR:
				continue
			case unix.EAGAIN:
				return false // wait for the poller
			case nil:
			default:
				sockErr = os.NewSyscallError("recvfrom", err)
			}
			return true
		}
	})
	if err != nil {
		return err
	}
	return sockErr
}
