package images_test

import (
	"archive/tar"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/images"
	it "github.com/cove-dev/cove/internal/images/imagetest"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

func importer(t *testing.T) (*images.Importer, string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("unpacking keeps files' owners: needs root")
	}
	dir := t.TempDir()
	im, err := images.NewImporter(dir, images.Policy{}, 1<<30, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return im, dir
}

func importFile(t *testing.T, im *images.Importer, path string) (string, error) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, _, err := im.Import(t.Context(), f)
	return img.Rootfs, err
}

func TestLayersWhiteoutsAndOpaqueDirs(t *testing.T) {
	im, _ := importer(t)
	img := it.Image(t, v1.Config{User: "app", Env: []string{"A=1"}, WorkingDir: "/srv"},
		it.Busybox(t, false, "app:x:1234:1234:app:/home/app:/bin/sh\n", "app:x:1234:\n"),
		it.Layer(t, it.Dir("data", 0o755), it.File("data/gone", "x", 0o644), it.File("data/kept", "k", 0o644),
			it.Dir("opq", 0o755), it.File("opq/lower", "l", 0o644), it.Dir("opq/sub", 0o755), it.File("opq/sub/deep", "d", 0o644)),
		it.Layer(t, it.Whiteout("data/gone"), it.File("opq/upper", "u", 0o644), it.Opaque("opq")),
	)
	for _, format := range []string{"docker", "oci"} {
		t.Run(format, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "img.tar")
			if format == "docker" {
				it.DockerArchive(t, img, path)
			} else {
				it.OCIArchive(t, img, path, nil)
			}
			rootfs, err := importFile(t, im, path)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := os.Lstat(filepath.Join(rootfs, "data/gone")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("data/gone after its whiteout: %v", err)
			}
			if b, err := os.ReadFile(filepath.Join(rootfs, "data/kept")); err != nil || string(b) != "k" {
				t.Errorf("data/kept = %q, %v", b, err)
			}
			ents, err := os.ReadDir(filepath.Join(rootfs, "opq"))
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, e := range ents {
				names = append(names, e.Name())
			}
			if !slices.Equal(names, []string{"upper"}) {
				t.Errorf("opaque dir holds %v; want [upper]", names)
			}
		})
	}
}

func TestRefused(t *testing.T) {
	im, dir := importer(t)
	outside := t.TempDir()
	victim := filepath.Join(outside, "victim")
	if err := os.WriteFile(victim, []byte("host"), 0o644); err != nil {
		t.Fatal(err)
	}
	base := it.Busybox(t, false, "", "")
	cases := []struct {
		name    string
		entries []it.Entry
		want    string
	}{
		{"dotdot", []it.Entry{it.File("../../escaped", "x", 0o644)}, "leaves the image's root"},
		{"device", []it.Entry{{Name: "dev/mem", Type: tar.TypeChar, Mode: 0o600}}, "device node"},
		{"setuid", []it.Entry{it.File("bin/evil", "x", 0o4755)}, "not on the allowed list"},
		{"big uid", []it.Entry{{Name: "f", Type: tar.TypeReg, Mode: 0o644, UID: 70000}}, "IDs must be under"},
		{"absolute symlink then file", []it.Entry{it.Symlink("esc", outside), it.File("esc/pwned", "x", 0o644)}, "escapes"},
		{"relative symlink then file", []it.Entry{it.Symlink("up", "../../../../../../.."+outside), it.File("up/pwned", "x", 0o644)}, "escapes"},
		{"whiteout through symlink", []it.Entry{it.Symlink("w", outside), it.Whiteout("w/victim")}, "escapes"},
		{"hard link out", []it.Entry{{Name: "hl", Type: tar.TypeLink, Link: "../../etc/passwd"}}, "leaves the image's root"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := listDir(t, filepath.Join(dir, "v2"))
			path := filepath.Join(t.TempDir(), "img.tar")
			it.DockerArchive(t, it.Image(t, v1.Config{}, base, it.Layer(t, c.entries...)), path)
			_, err := importFile(t, im, path)
			var e *api.Error
			if !errors.As(err, &e) || e.Code != api.CodeInvalidArgument || !strings.Contains(e.Message, c.want) {
				t.Fatalf("import = %v; want invalid_argument saying %q", err, c.want)
			}
			if after := listDir(t, filepath.Join(dir, "v2")); !slices.Equal(before, after) {
				t.Errorf("images dir changed: %v → %v", before, after)
			}
			if b, err := os.ReadFile(victim); err != nil || string(b) != "host" {
				t.Errorf("host file: %q, %v", b, err)
			}
			if ents, _ := os.ReadDir(outside); len(ents) != 1 {
				t.Errorf("something was written outside: %v", ents)
			}
		})
	}
	t.Run("tampered layer", func(t *testing.T) {
		img := it.Image(t, v1.Config{}, base, it.Layer(t, it.File("f", "original", 0o644)))
		path := filepath.Join(t.TempDir(), "img.tar")
		it.OCIArchive(t, img, path, func(d string) {
			blob := it.LayerBlob(t, img, 1, d)
			tar := it.Layer(t, it.File("f", "tampered", 0o644))
			rc, _ := tar.Compressed()
			defer rc.Close()
			b := make([]byte, 0, 1024)
			buf := make([]byte, 512)
			for {
				n, err := rc.Read(buf)
				b = append(b, buf[:n]...)
				if err != nil {
					break
				}
			}
			if err := os.WriteFile(blob, b, 0o644); err != nil {
				t.Fatal(err)
			}
		})
		_, err := importFile(t, im, path)
		if err == nil || !strings.Contains(err.Error(), "digest mismatch") {
			t.Fatalf("import = %v; want a digest mismatch", err)
		}
	})
}

func TestSameImageStoredOnce(t *testing.T) {
	im, dir := importer(t)
	img := it.Image(t, v1.Config{}, it.Busybox(t, false, "", ""))
	path := filepath.Join(t.TempDir(), "img.tar")
	it.DockerArchive(t, img, path)
	for i := range 2 {
		f, _ := os.Open(path)
		_, created, err := im.Import(t.Context(), f)
		f.Close()
		if err != nil || created != (i == 0) {
			t.Fatalf("import %d: created %v, %v", i, created, err)
		}
	}
	if got := listDir(t, filepath.Join(dir, "v2")); len(got) != 2 { // the image and the lock
		t.Errorf("images dir holds %v", got)
	}
}

func listDir(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// TestSameImageStagedTwice: two imports of one digest unpack side by side,
// each in its own staging directory; the first commit stores the tree, the
// second finds it and drops its copy. One tree is left, and no staging
// directory.
func TestSameImageStagedTwice(t *testing.T) {
	im, dir := importer(t)
	img := it.Image(t, v1.Config{}, it.Busybox(t, false, "", ""))
	path := filepath.Join(t.TempDir(), "img.tar")
	it.DockerArchive(t, img, path)
	var handles []string
	var digest string
	for range 2 {
		f, _ := os.Open(path)
		got, h, err := im.StageImage(t.Context(), f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		handles, digest = append(handles, h), got.Digest
	}
	if got := listDir(t, filepath.Join(dir, "v2")); len(got) != 3 || slices.Contains(got, strings.Replace(digest, ":", "-", 1)) {
		t.Fatalf("while staged, the images dir holds %v; want the lock and two staging directories", got)
	}
	for i, h := range handles {
		created, err := im.CommitImage(t.Context(), h)
		if err != nil || created != (i == 0) {
			t.Fatalf("commit %d: created %v, %v", i, created, err)
		}
	}
	if got := listDir(t, filepath.Join(dir, "v2")); !slices.Equal(got, []string{".imports.lock", strings.Replace(digest, ":", "-", 1)}) {
		t.Errorf("images dir holds %v; want the lock and one tree", got)
	}
}

// TestStagingSweptAtStart: a staging directory that no process holds (a
// crash's) is removed when an importer opens the images dir; one that is
// held (an import in progress, maybe of another server) is kept; a
// discarded one is gone.
func TestStagingSweptAtStart(t *testing.T) {
	im, dir := importer(t)
	stale := filepath.Join(dir, "v2", ".upload-crashed")
	if err := os.MkdirAll(filepath.Join(stale, "tree", "rootfs"), 0o700); err != nil {
		t.Fatal(err)
	}
	img := it.Image(t, v1.Config{}, it.Busybox(t, false, "", ""))
	path := filepath.Join(t.TempDir(), "img.tar")
	it.DockerArchive(t, img, path)
	f, _ := os.Open(path)
	_, held, err := im.StageImage(t.Context(), f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := images.NewImporter(dir, images.Policy{}, 1<<30, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the crashed staging directory: %v; want it removed", err)
	}
	if _, err := os.Stat(held); err != nil {
		t.Errorf("the held staging directory: %v; want it kept", err)
	}
	im.DiscardImage(held)
	if got := listDir(t, filepath.Join(dir, "v2")); !slices.Equal(got, []string{".imports.lock"}) {
		t.Errorf("images dir holds %v after the discard", got)
	}
}
