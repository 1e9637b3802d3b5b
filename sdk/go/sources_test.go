package cove

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestExcluder(t *testing.T) {
	ex, err := NewExcluder([]string{"*.pyc", "node_modules", "/dist", "build/out", "cache/", "**/tmp", "# comment", "", "*.env", "!keep.env"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		rel  string
		dir  bool
		want bool
	}{
		{"a.pyc", false, true},
		{"src/x/a.pyc", false, true},
		{"a.py", false, false},
		{"node_modules", true, true},
		{"web/node_modules", true, true},
		{"dist", true, true},
		{"web/dist", true, false},
		{"build/out", false, true},
		{"x/build/out", false, false},
		{"cache", true, true},
		{"cache", false, false},
		{"a/b/tmp", true, true},
		{"x/a.env", false, true},
		{"x/keep.env", false, false},
	} {
		if got := ex.Excluded(tt.rel, tt.dir); got != tt.want {
			t.Errorf("Excluded(%q, dir=%v) = %v; want %v", tt.rel, tt.dir, got, tt.want)
		}
	}
	for _, bad := range []string{"[", "a/[b"} {
		if _, err := NewExcluder([]string{bad}); err == nil {
			t.Errorf("pattern %q accepted", bad)
		}
	}
}

func TestWriteDirArchive(t *testing.T) {
	dir := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(dir, "a/b"), 0o755))
	must(os.MkdirAll(filepath.Join(dir, "empty"), 0o755))
	must(os.MkdirAll(filepath.Join(dir, "node_modules/x"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "a/b/run.sh"), []byte("#!/bin/sh\n"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "a/x.pyc"), []byte("x"), 0o644))
	must(os.WriteFile(filepath.Join(dir, "node_modules/x/i.js"), []byte("x"), 0o644))
	must(os.Symlink("b/run.sh", filepath.Join(dir, "a/link")))
	must(os.WriteFile(filepath.Join(dir, IgnoreFile), []byte("node_modules/\n"), 0o644))
	ex, err := NewExcluder([]string{"*.pyc"})
	must(err)
	must(ex.AddFile(filepath.Join(dir, IgnoreFile)))
	var buf bytes.Buffer
	must(WriteDirArchive(&buf, dir, ex))
	zr, err := gzip.NewReader(&buf)
	must(err)
	tr := tar.NewReader(zr)
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		must(err)
		names = append(names, h.Name)
		switch h.Name {
		case "a/b/run.sh":
			if h.Mode&0o777 != 0o755 {
				t.Errorf("run.sh mode %o", h.Mode)
			}
		case "a/link":
			if h.Typeflag != tar.TypeSymlink || h.Linkname != "b/run.sh" {
				t.Errorf("link = %+v", h)
			}
		}
	}
	slices.Sort(names)
	want := []string{IgnoreFile, "a/", "a/b/", "a/b/run.sh", "a/link", "empty/"}
	if !slices.Equal(names, want) {
		t.Fatalf("archive has %v; want %v", names, want)
	}
}
