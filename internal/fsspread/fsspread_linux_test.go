package fsspread

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestSubdirs: a directory is marked once and stays usable: directories
// and files are made in it as before. A filesystem without the mark
// (tmpfs) says so.
func TestSubdirs(t *testing.T) {
	dir := t.TempDir()
	if err := Subdirs(dir); errors.Is(err, ErrUnsupported) {
		t.Skipf("%s: %v", dir, err)
	} else if err != nil {
		t.Fatal(err)
	}
	if ok, err := Spread(dir); err != nil || !ok {
		t.Fatalf("Spread = %v, %v after Subdirs; want true", ok, err)
	}
	if err := Subdirs(dir); err != nil {
		t.Errorf("marking again: %v", err)
	}
	sub := filepath.Join(dir, "sbx_1")
	if err := os.Mkdir(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sub, "f"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Subdirs(filepath.Join(dir, "missing")); err == nil {
		t.Error("marking a directory that is not there: no error")
	}
}

// TestSubdirsUnsupported: on tmpfs the mark is refused as unsupported.
func TestSubdirsUnsupported(t *testing.T) {
	const shm = "/dev/shm"
	if _, err := os.Stat(shm); err != nil {
		t.Skip(err)
	}
	dir, err := os.MkdirTemp(shm, "fsspread-")
	if err != nil {
		t.Skip(err)
	}
	defer os.RemoveAll(dir)
	if err := Subdirs(dir); !errors.Is(err, ErrUnsupported) {
		t.Errorf("Subdirs on tmpfs: %v; want ErrUnsupported", err)
	}
}
