// Package modproxy writes the Go modules of this tree that users import
// (api and sdk/go) as a module proxy in a directory: the layout the go
// command reads through GOPROXY=file://DIR. `make dist` writes one, and a
// test fetches the SDK through it with `go get` exactly as a user fetches
// a release, so the modules are proven to build as published, with no
// replace.
package modproxy

import (
	"archive/zip"
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"
)

// Root is the module path of the tree; the published modules sit under it.
const Root = "github.com/cove-dev/cove"

// Published are the modules released together, as directories of the
// tree. Both are tagged at the same version (dir/vX.Y.Z).
var Published = []string{"api", "sdk/go"}

// Version is the version the next release gives the published modules:
// the version of api that sdk/go's go.mod requires, since the two are
// tagged together.
func Version(tree string) (string, error) {
	f, err := os.Open(filepath.Join(tree, "sdk", "go", "go.mod"))
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if fields = trimRequire(fields); len(fields) >= 2 && fields[0] == Root+"/api" {
			return fields[1], nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", errors.New("sdk/go/go.mod requires no version of " + Root + "/api")
}

func trimRequire(fields []string) []string {
	if len(fields) > 0 && fields[0] == "require" {
		return fields[1:]
	}
	return fields
}

// Write writes every published module of tree at version into out, in the
// proxy layout: <module>/@v/list, <version>.info, .mod and .zip.
func Write(out, tree, version string, at time.Time) error {
	for _, dir := range Published {
		if err := writeModule(out, filepath.Join(tree, filepath.FromSlash(dir)), Root+"/"+dir, version, at); err != nil {
			return fmt.Errorf("module %s: %w", dir, err)
		}
	}
	return nil
}

func writeModule(out, dir, modPath, version string, at time.Time) error {
	v := filepath.Join(out, filepath.FromSlash(escape(modPath)), "@v")
	if err := os.MkdirAll(v, 0o755); err != nil {
		return err
	}
	mod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return err
	}
	info, _ := json.Marshal(struct {
		Version string
		Time    time.Time
	}{version, at.UTC()})
	for name, body := range map[string][]byte{"list": []byte(version + "\n"), version + ".info": info, version + ".mod": mod} {
		if err := os.WriteFile(filepath.Join(v, name), body, 0o644); err != nil {
			return err
		}
	}
	return writeZip(filepath.Join(v, version+".zip"), dir, modPath+"@"+version)
}

// writeZip writes the module zip: every regular file of dir under
// prefix/, leaving out what the go command leaves out of a module (nested
// modules, vendor, version control).
func writeZip(name, dir, prefix string) (err error) {
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	zw := zip.NewWriter(f)
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel == "." {
				return nil
			}
			if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil || d.Name() == "vendor" || d.Name() == ".git" {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		w, err := zw.Create(path.Join(prefix, rel))
		if err != nil {
			return err
		}
		src, err := os.Open(p)
		if err != nil {
			return err
		}
		defer src.Close()
		_, err = io.Copy(w, src)
		return err
	})
	if err != nil {
		return err
	}
	return zw.Close()
}

// escape is the go command's case encoding of a module path: an upper
// case letter becomes '!' and the letter in lower case.
func escape(p string) string {
	var b strings.Builder
	for _, r := range p {
		if 'A' <= r && r <= 'Z' {
			b.WriteByte('!')
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}
