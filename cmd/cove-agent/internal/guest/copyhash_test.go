package guest

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"hash"
	"io"
	"testing"
	"testing/iotest"
	"time"
)

// TestCopyHashed: the bytes written and the bytes hashed are the body's,
// in order, whatever the size of the reads; a failed write or read ends
// the copy with its error.
func TestCopyHashed(t *testing.T) {
	data := make([]byte, 5*copyBuffer+777)
	for i := range data {
		data[i] = byte(i*31 + i>>11)
	}
	want := sha256.Sum256(data)
	for name, r := range map[string]func() io.Reader{
		"whole":   func() io.Reader { return bytes.NewReader(data) },
		"one":     func() io.Reader { return iotest.OneByteReader(bytes.NewReader(data[:70000])) },
		"half":    func() io.Reader { return iotest.HalfReader(bytes.NewReader(data)) },
		"dataEOF": func() io.Reader { return iotest.DataErrReader(bytes.NewReader(data)) },
		"empty":   func() io.Reader { return bytes.NewReader(nil) },
	} {
		t.Run(name, func(t *testing.T) {
			src, _ := io.ReadAll(r())
			var w bytes.Buffer
			h := sha256.New()
			n, err := copyHashed(&w, r(), h)
			if err != nil || n != int64(len(src)) || !bytes.Equal(w.Bytes(), src) {
				t.Fatalf("copied %d bytes (%v), want %d", n, err, len(src))
			}
			sum := sha256.Sum256(src)
			if name == "whole" && sum != want {
				t.Fatal("source changed")
			}
			if got := h.Sum(nil); !bytes.Equal(got, sum[:]) {
				t.Errorf("hash %x, want %x", got, sum)
			}
		})
	}
	boom := errors.New("boom")
	if _, err := copyHashed(failWriter{boom}, bytes.NewReader(data), sha256.New()); !errors.Is(err, boom) {
		t.Errorf("write error: %v", err)
	}
	r := io.MultiReader(bytes.NewReader(data), iotest.ErrReader(boom))
	if _, err := copyHashed(io.Discard, r, sha256.New()); !errors.Is(err, boom) {
		t.Errorf("read error: %v", err)
	}
}

type failWriter struct{ err error }

func (w failWriter) Write([]byte) (int, error) { return 0, w.err }

// TestCopyHashedOverlaps: the first piece is still being hashed when the
// second one is written (a copy that hashed each piece before going on
// would never write the second: the hash gives up waiting after a while,
// and the test fails).
func TestCopyHashedOverlaps(t *testing.T) {
	second := make(chan struct{})
	w := &countWriter{at: 2, reached: second}
	h := &gateHash{Hash: sha256.New(), gate: second}
	data := make([]byte, 3*copyBuffer)
	if _, err := copyHashed(w, bytes.NewReader(data), h); err != nil {
		t.Fatal(err)
	}
	if !h.overlapped {
		t.Error("the second piece was written only once the first was hashed")
	}
	if want := sha256.Sum256(data); !bytes.Equal(h.Sum(nil), want[:]) {
		t.Error("wrong hash")
	}
}

// countWriter closes reached at its at-th write.
type countWriter struct {
	n, at   int
	reached chan struct{}
}

func (w *countWriter) Write(p []byte) (int, error) {
	if w.n++; w.n == w.at {
		close(w.reached)
	}
	return len(p), nil
}

// gateHash waits, in its first write, for gate (at most 10 s).
type gateHash struct {
	hash.Hash
	gate       chan struct{}
	writes     int
	overlapped bool
}

func (h *gateHash) Write(p []byte) (int, error) {
	if h.writes++; h.writes == 1 {
		select {
		case <-h.gate:
			h.overlapped = true
		case <-time.After(10 * time.Second):
		}
	}
	return h.Hash.Write(p)
}
