package modproxy

import (
	"archive/zip"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func TestWrite(t *testing.T) {
	tree := t.TempDir()
	for name, body := range map[string]string{
		"api/go.mod":                "module " + Root + "/api\n\ngo 1.24\n",
		"api/error.go":              "package api\n",
		"sdk/go/go.mod":             "module " + Root + "/sdk/go\n\ngo 1.24\n\nrequire (\n\t" + Root + "/api v1.2.3\n)\n",
		"sdk/go/client.go":          "package cove\n",
		"sdk/go/testdata/x.json":    "{}",
		"sdk/go/nested/go.mod":      "module other\n",
		"sdk/go/nested/n.go":        "package n\n",
		"sdk/go/vendor/modules.txt": "",
		"sdk/go/.git/HEAD":          "",
	} {
		p := filepath.Join(tree, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	v, err := Version(tree)
	if err != nil || v != "v1.2.3" {
		t.Fatalf("Version = %q, %v; want v1.2.3 (the api version sdk/go requires)", v, err)
	}
	out := t.TempDir()
	if err := Write(out, tree, v, time.Now()); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(out, "github.com", "cove-dev", "cove", "sdk", "go", "@v")
	list, err := os.ReadFile(filepath.Join(dir, "list"))
	if err != nil || string(list) != "v1.2.3\n" {
		t.Errorf("list = %q, %v", list, err)
	}
	zr, err := zip.OpenReader(filepath.Join(dir, "v1.2.3.zip"))
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	var names []string
	for _, f := range zr.File {
		names = append(names, f.Name)
	}
	slices.Sort(names)
	pre := Root + "/sdk/go@v1.2.3/"
	want := []string{pre + "client.go", pre + "go.mod", pre + "testdata/x.json"}
	if !slices.Equal(names, want) {
		t.Errorf("zip holds %q\nwant %q", names, want)
	}
	if _, err := os.Stat(filepath.Join(out, "github.com", "cove-dev", "cove", "api", "@v", "v1.2.3.mod")); err != nil {
		t.Error(err)
	}
}
