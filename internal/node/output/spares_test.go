package output

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"github.com/cove-dev/cove/internal/agent/wire"
)

// inode is the inode number of the file at p.
func inode(t *testing.T, p string) uint64 {
	t.Helper()
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return st.Sys().(*syscall.Stat_t).Ino
}

// record makes a log at path that recorded both streams and ended.
func record(t *testing.T, s *Spares, path, out string) {
	t.Helper()
	l, err := s.Open(path, 1<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, f := range []wire.Frame{frame(wire.FrameStdout, 1, out), frame(wire.FrameStderr, 2, "err-"+out), exitFrame(t, 3, 0)} {
		if err := l.Append(f); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSparesRecycleLogs: the files of a sandbox's logs are emptied and
// kept as spares when its directory goes, as many as there is room for;
// a new log takes them (the same inodes, none made) and reads back only
// what it recorded itself.
func TestSparesRecycleLogs(t *testing.T) {
	root := t.TempDir()
	s, err := OpenSpares(filepath.Join(root, ".spare"), 4)
	if err != nil {
		t.Fatal(err)
	}
	old := filepath.Join(root, "sbx_old")
	record(t, s, filepath.Join(old, "cmd_1"), "secret-one")
	record(t, s, filepath.Join(old, "cmd_2"), "secret-two")
	var inodes []uint64
	for _, part := range []string{"index", "stdout", "stderr"} {
		for _, cmd := range []string{"cmd_1", "cmd_2"} {
			inodes = append(inodes, inode(t, filepath.Join(old, cmd+"."+part)))
		}
	}
	if err := s.Recycle(old); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(old); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the recycled directory is still there: %v", err)
	}
	if got := s.Len(); got != 4 {
		t.Fatalf("%d spares after recycling six files with room for four, want 4", got)
	}
	entries, err := os.ReadDir(filepath.Join(root, ".spare"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if info, err := e.Info(); err != nil || info.Size() != 0 {
			t.Errorf("spare %s holds %d bytes, want none (%v)", e.Name(), info.Size(), err)
		}
	}

	// A new log of another sandbox takes spares for its index and streams.
	path := filepath.Join(root, "sbx_new", "cmd_9")
	record(t, s, path, "mine")
	if got := s.Len(); got != 1 {
		t.Errorf("%d spares after a log took three, want 1", got)
	}
	for _, part := range []string{"index", "stdout", "stderr"} {
		if ino := inode(t, path+"."+part); !slices.Contains(inodes, ino) {
			t.Errorf("the new log's %s is inode %d, not one recycled %v", part, ino, inodes)
		}
	}
	l, err := OpenExisting(path, 1<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	got, exit := collect(t, l, 0)
	if got != "std:mine;std:err-mine;" || exit == nil || exit.ExitCode != 0 {
		t.Errorf("the new log reads %q, exit %+v; want only its own output", got, exit)
	}
	for _, stream := range []string{"stdout", "stderr"} {
		r, size, err := l.Stream(stream)
		if err != nil {
			t.Fatal(err)
		}
		b := make([]byte, size)
		r.ReadAt(b, 0)
		if want := map[string]string{"stdout": "mine", "stderr": "err-mine"}[stream]; string(b) != want {
			t.Errorf("%s holds %q, want %q", stream, b, want)
		}
	}
}

// TestSparesCreate: a log whose files exist already is opened, not given
// a spare; a log in a directory not made yet gets it made; without
// spares, files are created.
func TestSparesCreate(t *testing.T) {
	root := t.TempDir()
	s, err := OpenSpares(filepath.Join(root, ".spare"), 8)
	if err != nil {
		t.Fatal(err)
	}
	record(t, nil, filepath.Join(root, "sbx_a", "cmd_1"), "x")
	if err := s.Recycle(filepath.Join(root, "sbx_a")); err != nil {
		t.Fatal(err)
	}
	if s.Len() != 3 {
		t.Fatalf("%d spares, want 3", s.Len())
	}
	// There already: opened and repaired, no spare taken.
	path := filepath.Join(root, "sbx_b", "cmd_1")
	record(t, nil, path, "first")
	l, err := s.Open(path, 1<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := collect(t, l, 0); got != "std:first;std:err-first;" {
		t.Errorf("the log there already reads %q", got)
	}
	l.Close()
	if s.Len() != 3 {
		t.Errorf("%d spares after opening a log there already, want 3", s.Len())
	}
	// In a directory not made yet.
	record(t, s, filepath.Join(root, "sbx_c", "deeper", "cmd_1"), "y")
	if s.Len() != 0 {
		t.Errorf("%d spares after a new log in a new directory, want 0", s.Len())
	}
	// None left: created.
	record(t, s, filepath.Join(root, "sbx_c", "cmd_2"), "z")
	// Nil spares: Recycle deletes.
	if err := (*Spares)(nil).Recycle(filepath.Join(root, "sbx_c")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "sbx_c")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("nil spares left the directory: %v", err)
	}
}

// TestOpenSparesKeepsOnlyEmptyFiles: what an earlier run left among the
// spares is taken up only if it is an empty file; a file with bytes in
// it (put there by hand, or a crash) is never handed to a new log.
func TestOpenSparesKeepsOnlyEmptyFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), ".spare")
	if err := os.MkdirAll(filepath.Join(dir, "a-dir"), 0o700); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{"empty1": "", "empty2": "", "full": "someone's output"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	s, err := OpenSpares(dir, 8)
	if err != nil {
		t.Fatal(err)
	}
	if s.Len() != 2 {
		t.Errorf("%d spares taken up, want the 2 empty files", s.Len())
	}
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{"empty1", "empty2"}) {
		t.Errorf("left in the spares' directory: %v, want the empty files only", names)
	}
}
