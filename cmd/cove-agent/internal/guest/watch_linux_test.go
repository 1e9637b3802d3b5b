package guest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cove-dev/cove/internal/agent/client"
	"github.com/cove-dev/cove/internal/agent/wire"
)

// nextUntil reads w until an event matches, failing on the watch's end.
func nextUntil(t *testing.T, w *client.FileWatch, match func(wire.WatchEvent) bool) []wire.WatchEvent {
	t.Helper()
	var seen []wire.WatchEvent
	for {
		ev, err := w.Next()
		if err != nil {
			t.Fatalf("watch ended before the event: %v (seen %+v)", err, seen)
		}
		seen = append(seen, ev)
		if match(ev) {
			return seen
		}
	}
}

// TestWatchRecursiveNewDirectory: a recursive watch reports a file
// written in a directory made after it started, with its entry, under the
// path it was asked for.
func TestWatchRecursiveNewDirectory(t *testing.T) {
	_, c := startServer(t, ServerConfig{})
	root := t.TempDir()
	w, err := c.WatchFiles(t.Context(), root, true)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := os.MkdirAll(filepath.Join(root, "a/b"), 0o755); err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(root, "a/b/f.txt")
	if err := os.WriteFile(f, []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	seen := nextUntil(t, w, func(ev wire.WatchEvent) bool {
		return ev.Path == f && ev.Entry != nil && ev.Entry.Size == 5
	})
	for _, ev := range seen {
		if !strings.HasPrefix(ev.Path, root+"/") {
			t.Errorf("event outside the watch: %+v", ev)
		}
	}
	if err := os.Remove(f); err != nil {
		t.Fatal(err)
	}
	nextUntil(t, w, func(ev wire.WatchEvent) bool { return ev.Type == wire.WatchRemove && ev.Path == f })
}

// TestWatchNotRecursive: without recursive, a subdirectory's files are
// not reported; the directory's own entries are.
func TestWatchNotRecursive(t *testing.T) {
	_, c := startServer(t, ServerConfig{})
	root := t.TempDir()
	os.Mkdir(filepath.Join(root, "sub"), 0o755)
	w, err := c.WatchFiles(t.Context(), root, false)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	os.WriteFile(filepath.Join(root, "sub/inner"), []byte("x"), 0o644)
	os.WriteFile(filepath.Join(root, "top"), []byte("x"), 0o644)
	seen := nextUntil(t, w, func(ev wire.WatchEvent) bool { return ev.Path == filepath.Join(root, "top") })
	for _, ev := range seen {
		if strings.Contains(ev.Path, "inner") {
			t.Errorf("non-recursive watch reported %+v", ev)
		}
	}
}

// TestWatchSymlinks: a watch through a symlink reports the path it was
// asked for; a symlink below a recursive watch is not entered; the kernel's
// views and magic links cannot be watched.
func TestWatchSymlinks(t *testing.T) {
	_, c := startServer(t, ServerConfig{})
	root := t.TempDir()
	real := filepath.Join(root, "real")
	os.Mkdir(real, 0o755)
	outside := filepath.Join(root, "outside")
	os.Mkdir(outside, 0o755)
	link := filepath.Join(root, "link")
	os.Symlink(real, link)
	os.Symlink(outside, filepath.Join(real, "out"))

	w, err := c.WatchFiles(t.Context(), link, true)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	os.WriteFile(filepath.Join(outside, "secret"), []byte("x"), 0o644)
	os.WriteFile(filepath.Join(real, "mine"), []byte("x"), 0o644)
	seen := nextUntil(t, w, func(ev wire.WatchEvent) bool { return ev.Path == filepath.Join(link, "mine") })
	for _, ev := range seen {
		if strings.Contains(ev.Path, "secret") || strings.HasPrefix(ev.Path, real) {
			t.Errorf("watch reported %+v", ev)
		}
	}

	for _, p := range []string{"/proc/1/root", "/proc/self/cwd", "/proc", "/sys/fs", "/dev"} {
		if w, err := c.WatchFiles(t.Context(), p, false); err == nil {
			w.Close()
			t.Errorf("watch of %s allowed", p)
		}
	}
	procLink := filepath.Join(root, "proc-root")
	os.Symlink("/proc/1/root", procLink)
	if w, err := c.WatchFiles(t.Context(), procLink, true); err == nil {
		w.Close()
		t.Errorf("watch through a symlink to /proc/1/root allowed")
	}
	if w, err := c.WatchFiles(t.Context(), filepath.Join(real, "mine"), false); agentCode(err) != wire.CodeConflict {
		if err == nil {
			w.Close()
		}
		t.Errorf("watch of a file: %v", err)
	}
}
