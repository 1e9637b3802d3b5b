package images_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/cove-dev/cove/internal/images"
	it "github.com/cove-dev/cove/internal/images/imagetest"
	"github.com/cove-dev/cove/internal/node/saves"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// published imports a test image through an importer that publishes into
// a fresh blob store, and returns the store's directory, the store and
// the image's digest.
func published(t *testing.T, format string) (string, *saves.Dir, string) {
	t.Helper()
	control, _ := importer(t)
	storeDir := t.TempDir()
	store, err := saves.NewDir(storeDir)
	if err != nil {
		t.Fatal(err)
	}
	control.SetBlobs(store)
	img := it.Image(t, v1.Config{Env: []string{"A=1"}},
		it.Busybox(t, false, "", ""),
		it.Layer(t, it.Dir("data", 0o755), it.File("data/hello", "from the blobs", 0o644)))
	path := filepath.Join(t.TempDir(), "img.tar")
	if format == "docker" {
		it.DockerArchive(t, img, path)
	} else {
		it.OCIArchive(t, img, path, nil)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got, _, err := control.Import(t.Context(), f)
	if err != nil {
		t.Fatal(err)
	}
	return storeDir, store, got.Config.Digest
}

// countingBlobs counts the reads of each blob.
type countingBlobs struct {
	images.Blobs
	mu   sync.Mutex
	gets map[string]int
}

func (c *countingBlobs) GetBlob(ctx context.Context, digest string) (io.ReadCloser, error) {
	c.mu.Lock()
	c.gets[digest]++
	c.mu.Unlock()
	return c.Blobs.GetBlob(ctx, digest)
}

// entries lists what an images dir's v2 directory holds.
func entries(t *testing.T, imagesDir string) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(imagesDir, "v2"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// TestFetchFromBlobs: a node without an imported image brings it from
// the blobs the importer published, whole; fetches of one image at once
// store it once and leave no staging behind.
func TestFetchFromBlobs(t *testing.T) {
	for _, format := range []string{"docker", "oci"} {
		t.Run(format, func(t *testing.T) {
			_, store, digest := published(t, format)
			node, nodeDir := importer(t)
			counted := &countingBlobs{Blobs: store, gets: map[string]int{}}
			node.SetBlobs(counted)
			before := entries(t, nodeDir)
			var wg sync.WaitGroup
			errs := make([]error, 4)
			for i := range errs {
				wg.Go(func() { _, errs[i] = node.Fetch(t.Context(), digest) })
			}
			wg.Wait()
			for _, err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}
			img, err := node.Load(digest)
			if err != nil {
				t.Fatal(err)
			}
			if b, err := os.ReadFile(filepath.Join(img.Rootfs, "data/hello")); err != nil || string(b) != "from the blobs" {
				t.Errorf("data/hello = %q, %v", b, err)
			}
			counted.mu.Lock()
			if n := counted.gets[digest]; n != 1 {
				t.Errorf("the manifest was read %d times by four fetches at once; want once", n)
			}
			counted.mu.Unlock()
			if !slices.Equal(img.Config.Env, []string{"A=1"}) {
				t.Errorf("env = %v", img.Config.Env)
			}
			want := append(slices.Clone(before), strings.Replace(digest, ":", "-", 1))
			slices.Sort(want)
			if got := entries(t, nodeDir); !slices.Equal(got, want) {
				t.Errorf("images dir holds %v; want %v", got, want)
			}
		})
	}
}

// TestFetchRefusesTamperedBlobs: a blob whose bytes are not its digest's
// (the manifest, the config or a layer) refuses the image, and nothing
// of it is left in the node's images dir.
func TestFetchRefusesTamperedBlobs(t *testing.T) {
	for _, part := range []string{"manifest", "config", "layer"} {
		t.Run(part, func(t *testing.T) {
			storeDir, store, digest := published(t, "oci")
			node, nodeDir := importer(t)
			node.SetBlobs(store)
			before := entries(t, nodeDir)
			blob := digest
			if part != "manifest" {
				rc, err := store.GetBlob(t.Context(), digest)
				if err != nil {
					t.Fatal(err)
				}
				m, err := v1.ParseManifest(rc)
				rc.Close()
				if err != nil {
					t.Fatal(err)
				}
				blob = m.Config.Digest.String()
				if part == "layer" {
					blob = m.Layers[len(m.Layers)-1].Digest.String()
				}
			}
			path := filepath.Join(storeDir, ".images", strings.Replace(blob, ":", "-", 1)+".tar")
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			b[len(b)/2] ^= 1
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
			_, err = node.Fetch(t.Context(), digest)
			if err == nil || !strings.Contains(err.Error(), "corrupt") {
				t.Fatalf("fetch of a tampered %s: %v; want a refusal naming the corrupt blob", part, err)
			}
			if got := entries(t, nodeDir); !slices.Equal(got, before) {
				t.Errorf("images dir holds %v after the refusal; want %v", got, before)
			}
			if _, err := node.Load(digest); err == nil {
				t.Error("the refused image loads")
			}
		})
	}
}

// TestFetchWithoutBlobs: a digest the blobs do not hold is not_found.
func TestFetchWithoutBlobs(t *testing.T) {
	_, store, _ := published(t, "oci")
	node, _ := importer(t)
	node.SetBlobs(store)
	_, err := node.Fetch(t.Context(), "sha256:"+strings.Repeat("ab", 32))
	if err == nil || !strings.Contains(err.Error(), "no blob") {
		t.Fatalf("fetch of an unknown image: %v", err)
	}
	if _, err := node.Fetch(t.Context(), "sha256:../../x"); err == nil {
		t.Fatal("fetch of a malformed digest succeeded")
	}
}

// TestFetchRefusesLyingManifest: a manifest in the blobs (consistent with
// its own digest, so written by whoever can write the bucket) that names
// a part by a size other than its own, or by a digest that is not
// sha256, refuses the image and leaves nothing.
func TestFetchRefusesLyingManifest(t *testing.T) {
	_, store, digest := published(t, "oci")
	rc, err := store.GetBlob(t.Context(), digest)
	if err != nil {
		t.Fatal(err)
	}
	orig, err := io.ReadAll(rc)
	rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		change func(m *v1.Manifest)
		says   string
	}{
		{"layer shorter than it is", func(m *v1.Manifest) { m.Layers[len(m.Layers)-1].Size-- }, "longer than"},
		{"layer longer than it is", func(m *v1.Manifest) { m.Layers[len(m.Layers)-1].Size++ }, "EOF"},
		{"not sha256", func(m *v1.Manifest) { m.Config.Digest = v1.Hash{Algorithm: "sha512", Hex: strings.Repeat("ab", 64)} }, "want a sha256 digest"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := v1.ParseManifest(bytes.NewReader(orig))
			if err != nil {
				t.Fatal(err)
			}
			tc.change(m)
			raw, err := json.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			sum := sha256.Sum256(raw)
			lying := "sha256:" + hex.EncodeToString(sum[:])
			if err := store.PutBlob(t.Context(), lying, bytes.NewReader(raw)); err != nil {
				t.Fatal(err)
			}
			node, nodeDir := importer(t)
			node.SetBlobs(store)
			before := entries(t, nodeDir)
			_, err = node.Fetch(t.Context(), lying)
			if err == nil || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("fetch: %v; want a refusal saying %q", err, tc.says)
			}
			if got := entries(t, nodeDir); !slices.Equal(got, before) {
				t.Errorf("images dir holds %v after the refusal; want %v", got, before)
			}
		})
	}
}

// failingBlobs refuses every blob.
type failingBlobs struct{ images.Blobs }

func (failingBlobs) PutBlob(context.Context, string, io.Reader) error {
	return errors.New("the store is unreachable")
}

// TestImportNeedsItsBlobs: an import whose blobs cannot be stored is
// refused whole (no node could start the image), keeping nothing.
func TestImportNeedsItsBlobs(t *testing.T) {
	control, dir := importer(t)
	control.SetBlobs(failingBlobs{})
	before := entries(t, dir)
	path := filepath.Join(t.TempDir(), "img.tar")
	it.OCIArchive(t, it.Image(t, v1.Config{}, it.Busybox(t, false, "", "")), path, nil)
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, _, err := control.Import(t.Context(), f); err == nil || !strings.Contains(err.Error(), "unreachable") {
		t.Fatalf("import with an unreachable store: %v", err)
	}
	if got := entries(t, dir); !slices.Equal(got, before) {
		t.Errorf("images dir holds %v; want %v", got, before)
	}
}
