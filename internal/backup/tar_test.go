package backup

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestTarRoundTrip: a tree archived by writeTar comes back from
// extractTar with its contents, modes, symbolic links and times.
func TestTarRoundTrip(t *testing.T) {
	src := t.TempDir()
	when := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	must(t, os.MkdirAll(filepath.Join(src, "a", "b"), 0o750))
	must(t, os.WriteFile(filepath.Join(src, "a", "b", "f"), []byte("hello"), 0o640))
	must(t, os.Chmod(filepath.Join(src, "a", "b", "f"), 0o640))
	must(t, os.Symlink("b/f", filepath.Join(src, "a", "link")))
	must(t, os.Chtimes(filepath.Join(src, "a", "b", "f"), when, when))
	archive := filepath.Join(t.TempDir(), "x.tar")
	must(t, writeTar(t.Context(), archive, src, nil))

	dst := t.TempDir()
	must(t, extractTar(t.Context(), archive, dst))
	b, err := os.ReadFile(filepath.Join(dst, "a", "link"))
	if err != nil || string(b) != "hello" {
		t.Fatalf("through the link: %q, %v", b, err)
	}
	fi, err := os.Stat(filepath.Join(dst, "a", "b", "f"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o640 || !fi.ModTime().Equal(when) {
		t.Fatalf("f: mode %v, time %v; want 0640, %v", fi.Mode().Perm(), fi.ModTime(), when)
	}
	if fi, err := os.Stat(filepath.Join(dst, "a")); err != nil || fi.Mode().Perm() != 0o750 {
		t.Fatalf("a: %v, %v; want 0750", fi, err)
	}
}

// TestExtractStaysInside: archives crafted to write outside the target
// (a name with .., an absolute name, a file through a link the archive
// made, a link to a directory above) fail the restore and write nothing
// outside it.
func TestExtractStaysInside(t *testing.T) {
	type entry struct {
		name, link string
		dir        bool
	}
	for _, c := range []struct {
		name    string
		entries []entry
	}{
		{"dot dot", []entry{{name: "../escaped"}}},
		{"dot dot inside", []entry{{name: "a/../../escaped"}}},
		{"absolute", []entry{{name: "OUTSIDE/escaped"}}},
		{"through an absolute link", []entry{{name: "l", link: "OUTSIDE"}, {name: "l/escaped"}}},
		{"through a relative link", []entry{{name: "l", link: "../outside"}, {name: "l/escaped"}}},
		{"through a link in a directory", []entry{{name: "d", dir: true}, {name: "d/l", link: "../../outside"}, {name: "d/l/escaped"}}},
		{"a link as the file", []entry{{name: "l", link: "OUTSIDE/escaped"}, {name: "l"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			base := t.TempDir()
			outside := filepath.Join(base, "outside")
			dst := filepath.Join(base, "target")
			must(t, os.Mkdir(outside, 0o755))
			must(t, os.Mkdir(dst, 0o700))
			var buf bytes.Buffer
			tw := tar.NewWriter(&buf)
			for _, e := range c.entries {
				h := &tar.Header{Name: strings.ReplaceAll(e.name, "OUTSIDE", outside), Mode: 0o644, Typeflag: tar.TypeReg, Size: 3}
				switch {
				case e.dir:
					h.Typeflag, h.Mode, h.Size = tar.TypeDir, 0o755, 0
				case e.link != "":
					h.Typeflag, h.Size, h.Linkname = tar.TypeSymlink, 0, strings.ReplaceAll(e.link, "OUTSIDE", outside)
				}
				must(t, tw.WriteHeader(h))
				if h.Size > 0 {
					if _, err := tw.Write([]byte("bad")); err != nil {
						t.Fatal(err)
					}
				}
			}
			must(t, tw.Close())
			archive := filepath.Join(base, "x.tar")
			must(t, os.WriteFile(archive, buf.Bytes(), 0o600))
			if err := extractTar(t.Context(), archive, dst); err == nil {
				t.Fatal("extracted; want an error")
			}
			left, err := os.ReadDir(outside)
			if err != nil || len(left) != 0 {
				t.Fatalf("outside holds %v (%v); want nothing", left, err)
			}
			if _, err := os.Lstat(filepath.Join(base, "escaped")); err == nil {
				t.Fatal("a file was written beside the target")
			}
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
