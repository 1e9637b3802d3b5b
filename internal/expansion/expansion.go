// Package expansion bounds how far compressed bytes a tenant sent may
// expand while the host reads them (asset archives, source uploads, image
// layers): a few kilobytes of gzip can stand for terabytes of zeros, and
// every other bound (disk quotas, tree sizes) is reached only after the
// host has spent the time and the disk.
package expansion

import (
	"fmt"
	"io"

	"github.com/cove-dev/cove/api"
)

const (
	// Ratio is how many times its compressed size a stream may expand to
	// once past Floor. Real archives of source trees and images stay far
	// below it (text compresses about 5 to 10 times).
	Ratio = 100
	// Floor is what any stream may expand to whatever its ratio: small
	// archives of very regular bytes are common and harmless.
	Floor = 64 << 20
)

// Counter counts the bytes read through it: the compressed side.
type Counter struct {
	R io.Reader
	N int64
}

func (c *Counter) Read(p []byte) (int, error) {
	n, err := c.R.Read(p)
	c.N += int64(n)
	return n, err
}

// Reader reads the expanded side of a stream and fails with
// payload_too_large once more than Floor bytes came out and more than
// Ratio times what in reports went in.
type Reader struct {
	r    io.Reader
	in   func() int64
	what string
	out  int64
	err  error
}

// NewReader bounds r, the expansion of what in counts; what names the
// stream in the error ("the archive", "the image's layers").
func NewReader(r io.Reader, in func() int64, what string) *Reader {
	return &Reader{r: r, in: in, what: what}
}

func (x *Reader) Read(p []byte) (int, error) {
	if x.err != nil {
		return 0, x.err
	}
	n, err := x.r.Read(p)
	x.out += int64(n)
	if x.out > Floor {
		if in := x.in(); x.out > Ratio*in {
			x.err = &api.Error{Code: api.CodePayloadTooLarge,
				Message: fmt.Sprintf("%s expands more than %d times: %d bytes so far from %d compressed; it was refused as a decompression bomb and nothing was kept",
					x.what, Ratio, x.out, in),
				Details: map[string]any{"ratio": Ratio, "expanded_bytes": x.out, "compressed_bytes": in}}
			return 0, x.err
		}
	}
	return n, err
}

// Err is the error Reader failed with, if it did: callers whose readers
// of the expanded bytes turn read errors into their own keep this one.
func (x *Reader) Err() error { return x.err }
