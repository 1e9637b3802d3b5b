package backup

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestCopySparse: the copy has the bytes of the file and its holes stay
// holes (it takes the blocks of the data, not of the whole length).
func TestCopySparse(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	f, err := os.Create(src)
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("volume"), 20000)
	if _, err := f.WriteAt(data, 8<<20); err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(64 << 20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	dst := filepath.Join(dir, "dst")
	if err := copySparse(t.Context(), src, dst, 0o600); err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(src)
	b, err := os.ReadFile(dst)
	if err != nil || !bytes.Equal(a, b) {
		t.Fatalf("the copy differs (%d bytes, want %d): %v", len(b), len(a), err)
	}
	fi, _ := os.Stat(dst)
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", fi.Mode())
	}
	if blocks := fi.Sys().(*syscall.Stat_t).Blocks * 512; blocks > 4<<20 {
		t.Errorf("the copy takes %d bytes of disk for %d of data: its holes were filled", blocks, len(data))
	}
	// An interrupted copy stops and leaves no file.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := copySparse(ctx, src, filepath.Join(dir, "stopped"), 0o600); !errors.Is(err, context.Canceled) {
		t.Errorf("a copy after its context ended: %v, want canceled", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "stopped")); !os.IsNotExist(err) {
		t.Errorf("an interrupted copy left its file: %v", err)
	}
}

// TestRestoreVolumesRefusesNames: a manifest naming a volume that is not
// a volume ID (a path that would leave the data dir) is refused.
func TestRestoreVolumesRefusesNames(t *testing.T) {
	for _, id := range []string{"../x", "a/b", ".hidden", ""} {
		err := restoreVolumes(t.Context(), t.TempDir(), t.TempDir(), Manifest{Volumes: []string{id}})
		if err == nil || !strings.Contains(err.Error(), "not a volume ID") {
			t.Errorf("volume %q: %v, want refused", id, err)
		}
	}
}
