package cove

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// ignoreVectors are the shared .coveignore cases every client runs
// (sdk/testdata/coveignore.json).
type ignoreVectors struct {
	Cases []struct {
		Name   string            `json:"name"`
		Ignore map[string]string `json:"ignore"`
		Files  map[string]bool   `json:"files"`
	} `json:"cases"`
}

// TestCoveignoreVectors packs each case's folder and checks that exactly
// the files the vectors include are uploaded, .coveignore files among
// them.
func TestCoveignoreVectors(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "testdata", "coveignore.json"))
	if err != nil {
		t.Fatal(err)
	}
	var v ignoreVectors
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Cases) == 0 {
		t.Fatal("no cases")
	}
	for _, c := range v.Cases {
		t.Run(c.Name, func(t *testing.T) {
			dir := t.TempDir()
			write := func(rel, body string) {
				p := filepath.Join(dir, filepath.FromSlash(rel))
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want := map[string]bool{}
			for rel, body := range c.Ignore {
				write(rel, body)
				want[rel] = true
			}
			for rel, in := range c.Files {
				write(rel, "x")
				if in {
					want[rel] = true
				}
			}
			ex, err := NewExcluder(nil)
			if err != nil {
				t.Fatal(err)
			}
			var buf bytes.Buffer
			if err := WriteDirArchive(&buf, dir, ex); err != nil {
				t.Fatal(err)
			}
			got := map[string]bool{}
			zr, err := gzip.NewReader(&buf)
			if err != nil {
				t.Fatal(err)
			}
			tr := tar.NewReader(zr)
			for {
				h, err := tr.Next()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				if h.Typeflag == tar.TypeReg {
					got[strings.TrimPrefix(h.Name, "./")] = true
				}
			}
			for rel := range want {
				if !got[rel] {
					t.Errorf("%s left out, want it uploaded", rel)
				}
			}
			for rel := range got {
				if !want[rel] {
					t.Errorf("%s uploaded, want it left out", rel)
				}
			}
		})
	}
}
