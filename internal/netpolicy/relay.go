package netpolicy

import (
	"io"
	"net"
	"sync"
)

// Relayed bytes go through user space, in a buffer taken from a pool only
// while they move. Go would splice(2) between two TCP sockets, but a splice
// holds a pipe (two descriptors) for as long as it waits for its source,
// and gives it back to a pool that only the garbage collector empties: a
// relay waiting on both sides held six descriptors, and a flood of
// connections to a silent destination left thousands open long after the
// connections ended. Waiting for a source to become readable (awaitReadable)
// holds nothing but the two sockets.

// relayBuf is the most one read of a relay moves.
const relayBuf = 32 << 10

var relayBufs = sync.Pool{New: func() any { return new([relayBuf]byte) }}

// copyOnce waits until src has bytes, its end or an error, then moves what
// one read of at most limit bytes returns to dst. It returns the bytes
// written and the error of either side: io.EOF once src has ended. A read
// deadline of src bounds the wait.
func copyOnce(dst io.Writer, src net.Conn, limit int64) (int64, error) {
	if err := awaitReadable(src); err != nil {
		return 0, err
	}
	b := relayBufs.Get().(*[relayBuf]byte)
	defer relayBufs.Put(b)
	n, err := src.Read(b[:min(limit, relayBuf)])
	if n > 0 {
		w, werr := dst.Write(b[:n])
		if werr != nil {
			return int64(w), werr
		}
	}
	return int64(n), err
}

// copyN moves exactly n bytes from src to dst, as copyOnce does, calling
// count for each part written; an end of src before them is
// io.ErrUnexpectedEOF.
func copyN(dst io.Writer, src net.Conn, n int64, count func(int64)) error {
	for n > 0 {
		w, err := copyOnce(dst, src, n)
		count(w)
		n -= w
		switch {
		case n > 0 && err == io.EOF:
			return io.ErrUnexpectedEOF
		case err != nil && err != io.EOF:
			return err
		}
	}
	return nil
}
