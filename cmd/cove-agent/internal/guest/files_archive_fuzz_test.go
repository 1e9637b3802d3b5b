package guest

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzExtract builds a three-entry tar from fuzzed names, link targets and
// types and extracts it into a staging directory. Whatever it holds,
// nothing may appear outside the staging directory, and no symlink left in
// it may point outside the target folder.
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
	}
	for _, s := range seeds {
		f.Add(s.n1, s.l1, s.t1, s.n2, s.l2, s.t2, s.n3, []byte("data"))
	}
	f.Fuzz(func(t *testing.T, n1, l1 string, t1 byte, n2, l2 string, t2 byte, n3 string, data []byte) {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		for _, e := range []struct {
			name, link string
			typ        byte
		}{{n1, l1, t1}, {n2, l2, t2}, {n3, "", tar.TypeReg}} {
			typ := e.typ
			switch typ {
			case tar.TypeReg, tar.TypeDir, tar.TypeSymlink, tar.TypeLink:
			default:
				typ = tar.TypeReg
			}
			h := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: typ, Mode: 0o644}
			if typ == tar.TypeReg {
				h.Size = int64(len(data))
			}
			if tw.WriteHeader(h) != nil {
				return // not encodable as a tar: nothing to test
			}
			if typ == tar.TypeReg {
				tw.Write(data)
			}
		}
		if tw.Close() != nil {
			return
		}

		base := t.TempDir()
		target := filepath.Join(base, "target")
		stage := filepath.Join(base, "stage")
		if err := os.Mkdir(stage, 0o755); err != nil {
			t.Fatal(err)
		}
		sd, err := os.Open(stage)
		if err != nil {
			t.Fatal(err)
		}
		x := &extractor{p: "/target", target: target, stage: sd, uid: os.Getuid(), gid: os.Getgid()}
		_ = x.extract(bytes.NewReader(buf.Bytes()))
		x.closeDirs()
		sd.Close()

		entries, _ := os.ReadDir(base)
		for _, e := range entries {
			if e.Name() != "stage" {
				t.Fatalf("extraction wrote %s outside its staging directory", e.Name())
			}
		}
		filepath.WalkDir(stage, func(p string, d os.DirEntry, err error) error {
			if err != nil || d.Type()&os.ModeSymlink == 0 {
				return nil
			}
			link, _ := os.Readlink(p)
			rel, _ := filepath.Rel(stage, p)
			resolved := link
			if !filepath.IsAbs(link) {
				resolved = filepath.Join(target, filepath.Dir(rel), link)
			}
			if r, err := filepath.Rel(target, resolved); err != nil || r == ".." || strings.HasPrefix(r, "../") {
				t.Fatalf("symlink %s -> %s leaves the folder", rel, link)
			}
			return nil
		})
	})
}
