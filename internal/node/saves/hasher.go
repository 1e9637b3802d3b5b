package saves

import (
	"crypto/sha256"
	"hash"
	"sync"
)

// hashPiece is the most a hasher copies at once.
const hashPiece = 1 << 20

// hasher makes a sha-256 in a goroutine of its own from what is written
// to it, so that an archive's digest is made while the next part of the
// archive is read, compressed or written, rather than between them (the
// digest was the largest part of a save's CPU, after compression).
// Written bytes are copied, so the caller may reuse its buffer at once.
// The goroutine is the hasher's: it ends at Sum or Close, one of which
// must be called.
type hasher struct {
	in   chan []byte
	free chan []byte
	done chan struct{}
	h    hash.Hash
	once sync.Once
}

func newHasher() *hasher {
	h := &hasher{
		in:   make(chan []byte, 3),
		free: make(chan []byte, 5),
		done: make(chan struct{}),
		h:    sha256.New(),
	}
	go func() {
		defer close(h.done)
		for p := range h.in {
			h.h.Write(p)
			h.free <- p[:cap(p)]
		}
	}()
	return h
}

// Write hands a copy of p to the hashing goroutine.
func (h *hasher) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		var buf []byte
		select {
		case buf = <-h.free:
		default:
			buf = make([]byte, hashPiece)
		}
		k := copy(buf, p)
		h.in <- buf[:k]
		p = p[k:]
	}
	return n, nil
}

// Sum waits for everything written to be hashed and returns the digest.
func (h *hasher) Sum() []byte {
	h.Close()
	return h.h.Sum(nil)
}

// Close ends the hashing goroutine; the digest is then what Sum returns.
func (h *hasher) Close() {
	h.once.Do(func() { close(h.in) })
	<-h.done
}
