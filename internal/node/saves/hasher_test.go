package saves

import (
	"bytes"
	"crypto/sha256"
	"os"
	"path/filepath"
	"testing"
)

// TestHasher: the digest is sha-256 of what was written, whatever the
// sizes of the writes, though the writer reuses its buffer at once; Close
// without Sum ends the goroutine too.
func TestHasher(t *testing.T) {
	for _, tt := range []struct {
		name        string
		total, each int
	}{
		{"nothing", 0, 1},
		{"one byte", 1, 1},
		{"under a piece", hashPiece - 1, 4096},
		{"a piece at once", hashPiece, hashPiece},
		{"several pieces at once", 3*hashPiece + 7, 3*hashPiece + 7},
		{"many small writes", 2*hashPiece + 13, 1000},
	} {
		t.Run(tt.name, func(t *testing.T) {
			data := make([]byte, tt.total)
			for i := range data {
				data[i] = byte(i * 7 / 3)
			}
			h := newHasher()
			buf := make([]byte, tt.each)
			for off := 0; off < len(data); off += tt.each {
				n := copy(buf, data[off:])
				if k, err := h.Write(buf[:n]); k != n || err != nil {
					t.Fatalf("Write = %d, %v", k, err)
				}
				for i := range buf { // the caller's buffer is its own again
					buf[i] = 0xff
				}
			}
			want := sha256.Sum256(data)
			if got := h.Sum(); !bytes.Equal(got, want[:]) {
				t.Fatalf("sum %x, want %x", got, want)
			}
			h.Close() // again: nothing happens
		})
	}
	h := newHasher()
	h.Write([]byte("abandoned"))
	h.Close()
	select {
	case <-h.done:
	default:
		t.Fatal("Close left the goroutine running")
	}
}

// TestAppender: what goes through an appender lands in order, its
// writeback started as it passes writebackEvery.
func TestAppender(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	a := newAppender(f)
	var want []byte
	piece := make([]byte, 3<<20+5)
	for i := range 5 {
		for j := range piece {
			piece[j] = byte(i + j)
		}
		if n, err := a.Write(piece); n != len(piece) || err != nil {
			t.Fatalf("Write = %d, %v", n, err)
		}
		want = append(want, piece...)
	}
	if a.wb.from == 0 || a.wb.end != int64(len(want)) || a.wb.end-a.wb.from >= writebackEvery {
		t.Errorf("writeback pending [%d, %d) of %d", a.wb.from, a.wb.end, len(want))
	}
	got, err := os.ReadFile(path)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("file holds %d bytes (%v), want %d", len(got), err, len(want))
	}
}
