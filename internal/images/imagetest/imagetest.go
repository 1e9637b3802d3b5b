// Package imagetest builds OCI image archives from parts for tests: layers
// from tar entries the test lists (hostile ones included), images from
// layers and a config, written as a docker-save archive or an OCI image
// layout archive, with go-containerregistry.
package imagetest

import (
	"archive/tar"
	"bytes"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Entry is one tar entry of a layer.
type Entry struct {
	Name     string
	Type     byte // tar.TypeReg when 0
	Mode     int64
	UID, GID int
	Body     string
	Link     string // symlink or hard link target
}

// File, Dir, Symlink and Whiteout make entries.
func File(name, body string, mode int64) Entry {
	return Entry{Name: name, Type: tar.TypeReg, Mode: mode, Body: body}
}
func Dir(name string, mode int64) Entry { return Entry{Name: name, Type: tar.TypeDir, Mode: mode} }
func Symlink(name, target string) Entry {
	return Entry{Name: name, Type: tar.TypeSymlink, Mode: 0o777, Link: target}
}

// Whiteout deletes name of a lower layer; Opaque hides all of dir's lower
// contents.
func Whiteout(name string) Entry {
	d, b := filepath.Split(name)
	return File(d+".wh."+b, "", 0o644)
}
func Opaque(dir string) Entry { return File(strings.TrimSuffix(dir, "/")+"/.wh..wh..opq", "", 0o644) }

// Tar writes entries as a tar archive.
func Tar(t testing.TB, entries ...Entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		typ := e.Type
		if typ == 0 {
			typ = tar.TypeReg
		}
		h := &tar.Header{Name: e.Name, Typeflag: typ, Mode: e.Mode, Uid: e.UID, Gid: e.GID,
			Linkname: e.Link, ModTime: time.Unix(1700000000, 0), Format: tar.FormatPAX}
		if typ == tar.TypeReg {
			h.Size = int64(len(e.Body))
		}
		if typ == tar.TypeChar || typ == tar.TypeBlock {
			h.Devmajor, h.Devminor = 1, 3
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if typ == tar.TypeReg {
			if _, err := io.WriteString(tw, e.Body); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// Layer is a gzip-compressed layer of entries.
func Layer(t testing.TB, entries ...Entry) v1.Layer {
	t.Helper()
	b := Tar(t, entries...)
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// Busybox is a layer with the host's static busybox as /bin/busybox, /bin/sh
// (unless noShell) and a few applets as symlinks, /etc/passwd and
// /etc/group with root, user (1000) and extra lines, and /tmp.
func Busybox(t testing.TB, noShell bool, passwd, group string) v1.Layer {
	t.Helper()
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		t.Skipf("no static busybox (Debian's busybox-static): %v", err)
	}
	entries := []Entry{
		Dir("bin", 0o755), Dir("etc", 0o755), Dir("tmp", 0o1777), Dir("root", 0o700),
		{Name: "bin/busybox", Type: tar.TypeReg, Mode: 0o755, Body: string(bb)},
	}
	applets := []string{"ls", "cat", "id", "pwd", "env", "echo", "touch", "sleep", "mkdir", "rm", "stat", "test", "true", "wc", "head"}
	if !noShell {
		applets = append(applets, "sh")
	}
	for _, a := range applets {
		entries = append(entries, Symlink("bin/"+a, "busybox"))
	}
	entries = append(entries,
		File("etc/passwd", "root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000:user:/home/user:/bin/sh\n"+passwd, 0o644),
		File("etc/group", "root:x:0:\nuser:x:1000:\n"+group, 0o644),
	)
	return Layer(t, entries...)
}

// Image is layers on an empty image, with config c.
func Image(t testing.TB, c v1.Config, layers ...v1.Layer) v1.Image {
	t.Helper()
	img, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		t.Fatal(err)
	}
	if img, err = mutate.Config(img, c); err != nil {
		t.Fatal(err)
	}
	return img
}

// DockerArchive writes img as a docker-save archive (tarball.Write) at
// path.
func DockerArchive(t testing.TB, img v1.Image, path string) {
	t.Helper()
	tag, err := name.NewTag("local/test:latest")
	if err != nil {
		t.Fatal(err)
	}
	if err := tarball.WriteToFile(path, tag, img); err != nil {
		t.Fatal(err)
	}
}

// OCIArchive writes img as an OCI image layout in a tar archive at path;
// tamper, when set, may change the layout's files before they are packed.
func OCIArchive(t testing.TB, img v1.Image, path string, tamper func(dir string)) {
	t.Helper()
	dir := t.TempDir()
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(img); err != nil {
		t.Fatal(err)
	}
	if tamper != nil {
		tamper(dir)
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		h, err := tar.FileInfoHeader(fi, "")
		if err != nil {
			return err
		}
		h.Name = filepath.ToSlash(rel)
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if fi.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			_, err = tw.Write(b)
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
}

// LayerBlob is the path of img's layer i in an OCI layout at dir.
func LayerBlob(t testing.TB, img v1.Image, i int, dir string) string {
	t.Helper()
	ls, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	d, err := ls[i].Digest()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "blobs", d.Algorithm, d.Hex)
}
