package archive

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestTreeArchiveNoFollow: links (to a file and a directory outside the
// tree) travel as links, never as what they point at; a FIFO is skipped
// without blocking; a tree over the limit fails.
func TestTreeArchiveNoFollow(t *testing.T) {
	outside := t.TempDir()
	os.WriteFile(filepath.Join(outside, "secret"), []byte("host secret\n"), 0o644)
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "d", "e"), 0o755)
	os.WriteFile(filepath.Join(root, "d", "f.txt"), []byte("hello\n"), 0o644)
	os.WriteFile(filepath.Join(root, "run.sh"), []byte("#!/bin/sh\n"), 0o755)
	os.Symlink(filepath.Join(outside, "secret"), filepath.Join(root, "file-link"))
	os.Symlink(outside, filepath.Join(root, "dir-link"))
	if err := syscall.Mkfifo(filepath.Join(root, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}

	var buf bytes.Buffer
	if err := WriteTree(&buf, root, 1<<20); err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(&buf)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	got := map[string]string{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		switch h.Typeflag {
		case tar.TypeSymlink:
			got[h.Name] = "-> " + h.Linkname
		case tar.TypeDir:
			got[h.Name] = "dir"
		default:
			got[h.Name] = string(b) + " " + os.FileMode(h.Mode).String()
		}
	}
	want := map[string]string{
		"d/":        "dir",
		"d/e/":      "dir",
		"d/f.txt":   "hello\n -rw-r--r--",
		"run.sh":    "#!/bin/sh\n -rwxr-xr-x",
		"file-link": "-> " + filepath.Join(outside, "secret"),
		"dir-link":  "-> " + outside,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("archive (-want +got):\n%s", diff)
	}

	if err := WriteTree(io.Discard, root, 10); !errors.Is(err, ErrTreeTooLarge) {
		t.Errorf("archive over the limit: %v", err)
	}
	if n, err := TreeSize(root, 1<<20); err != nil || n != 6+10 {
		t.Errorf("TreeSize = %d, %v; want 16", n, err)
	}
	if _, err := TreeSize(root, 15); !errors.Is(err, ErrTreeTooLarge) {
		t.Errorf("TreeSize over the limit: %v", err)
	}
	// The root itself may not be a link.
	link := filepath.Join(t.TempDir(), "root-link")
	os.Symlink(root, link)
	if err := WriteTree(io.Discard, link, 1<<20); err == nil {
		t.Error("a root that is a link was followed")
	}
}
