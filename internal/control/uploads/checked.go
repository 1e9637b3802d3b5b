package uploads

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"

	"github.com/cove-dev/cove/api"
)

// CheckedReader hashes an upload as it is read and fails it at its end
// when it is larger than max or its digest differs from the one the
// client gave: the agent, which reads to the end before anything lands,
// then extracts nothing.
type CheckedReader struct {
	r       io.Reader
	h       hash.Hash
	n, max  int64
	want    string
	trailer func() (string, error)

	done bool
	sum  string
	err  error
}

// NewCheckedReader checks r against max bytes and the hex sha-256 want,
// or the one trailer returns after the body when it returns one.
func NewCheckedReader(r io.Reader, max int64, want string, trailer func() (string, error)) *CheckedReader {
	return &CheckedReader{r: r, h: sha256.New(), max: max, want: want, trailer: trailer}
}

// Err is why the reader failed the upload, nil when it did not.
func (c *CheckedReader) Err() error { return c.err }

// Sum is the hex sha-256 of the body, once read to its end.
func (c *CheckedReader) Sum() string { return c.sum }

// Done says the body was read to its end and passed.
func (c *CheckedReader) Done() bool { return c.done }

func (c *CheckedReader) Read(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	n, err := c.r.Read(p)
	c.h.Write(p[:n])
	c.n += int64(n)
	if c.n > c.max {
		c.err = TooLarge(c.n, c.max)
		return 0, c.err
	}
	if err == io.EOF {
		c.sum = hex.EncodeToString(c.h.Sum(nil))
		want := c.want
		if c.trailer != nil {
			t, terr := c.trailer()
			if terr != nil {
				c.err = terr
				return n, c.err
			}
			if t != "" {
				want = t
			}
		}
		if want != "" && want != c.sum {
			c.err = &api.Error{
				Code:    api.CodeUnprocessable,
				Message: fmt.Sprintf("the archive's sha-256 is %s but the request's digest says %s; nothing was extracted", c.sum, want),
				Details: map[string]any{"sha256": c.sum, "expected": want},
			}
			return n, c.err
		}
		c.done = true
	}
	return n, err
}

// TooLarge is the error of a source upload of n bytes past max.
func TooLarge(n, max int64) error {
	return &api.Error{
		Code:    api.CodePayloadTooLarge,
		Message: fmt.Sprintf("the archive is larger than %d bytes, the most a source upload may be; nothing was extracted", max),
		Details: map[string]any{"max_bytes": max, "bytes": n},
	}
}
