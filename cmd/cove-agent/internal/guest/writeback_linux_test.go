package guest

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestAppender: an upload's file gets all its bytes, in order, and its
// writeback is started every writebackEvery bytes, leaving less than
// that for the fsync.
func TestAppender(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	a := &appender{f: f}
	var want []byte
	piece := make([]byte, 3<<20+5)
	for i := range 7 {
		for j := range piece {
			piece[j] = byte(i + j)
		}
		if n, err := a.Write(piece); n != len(piece) || err != nil {
			t.Fatalf("Write = %d, %v", n, err)
		}
		want = append(want, piece...)
		if a.off-a.started >= writebackEvery {
			t.Fatalf("after %d bytes, writeback started for %d only", a.off, a.started)
		}
	}
	if a.off != int64(len(want)) || a.started == 0 {
		t.Errorf("wrote %d of %d bytes, writeback started for %d", a.off, len(want), a.started)
	}
	got, err := os.ReadFile(path)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("file holds %d bytes (%v), want %d", len(got), err, len(want))
	}
}
