package archive

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzExtract extracts a three-entry tar.gz of fuzzed names, link targets
// and types into a folder. Whatever it holds, nothing appears beside the
// folder, and no symlink in it points out of it.
func FuzzExtract(f *testing.F) {
	seeds := []struct {
		n1, l1 string
		t1     byte
		n2, l2 string
		t2     byte
		n3     string
	}{
		{"a.txt", "", tar.TypeReg, "d/", "", tar.TypeDir, "d/b.txt"},
		{"../x", "", tar.TypeReg, "ok", "", tar.TypeReg, "ok2"},
		{"/abs", "", tar.TypeReg, "l", "../../etc", tar.TypeSymlink, "l/passwd"},
		{"l", "/etc", tar.TypeSymlink, "l/x", "", tar.TypeReg, "y"},
		{"h", "../outside", tar.TypeLink, "d/../../z", "", tar.TypeReg, "q"},
		{"s", "d/../..", tar.TypeSymlink, "s/evil", "", tar.TypeReg, "r"},
		{"d/s", "..", tar.TypeSymlink, "d/s/x", "", tar.TypeReg, "dev"},
	}
	for _, s := range seeds {
		f.Add(s.n1, s.l1, s.t1, s.n2, s.l2, s.t2, s.n3, []byte("data"))
	}
	f.Fuzz(func(t *testing.T, n1, l1 string, t1 byte, n2, l2 string, t2 byte, n3 string, data []byte) {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		tw := tar.NewWriter(zw)
		for _, e := range []struct {
			name, link string
			typ        byte
		}{{n1, l1, t1}, {n2, l2, t2}, {n3, "", tar.TypeReg}} {
			h := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: 0o644}
			if e.typ == tar.TypeReg {
				h.Size = int64(len(data))
			}
			if tw.WriteHeader(h) != nil {
				return // not an archive archive/tar writes
			}
			if e.typ == tar.TypeReg {
				tw.Write(data)
			}
		}
		tw.Close()
		zw.Close()
		parent := t.TempDir()
		dir := filepath.Join(parent, "dir")
		Extract(&buf, dir) // refusing is fine; leaving is not
		es, err := os.ReadDir(parent)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range es {
			if e.Name() != "dir" {
				t.Fatalf("%q appeared beside the folder", e.Name())
			}
		}
		filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.Type()&fs.ModeSymlink == 0 {
				return nil
			}
			target, _ := os.Readlink(p)
			rel, _ := filepath.Rel(dir, p)
			to := path.Join(path.Dir(filepath.ToSlash(rel)), target)
			if path.IsAbs(target) || to == ".." || strings.HasPrefix(to, "../") {
				t.Fatalf("symlink %s -> %s points out of the folder", rel, target)
			}
			return nil
		})
	})
}
