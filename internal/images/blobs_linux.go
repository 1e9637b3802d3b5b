package images

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/node/image"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Blobs keep content-addressed files by the sha256 digest of their bytes
// ("sha256:<hex>"): the save store's blobs (internal/node/saves), which
// every node of a fleet reads. PutBlob refuses bytes of another digest;
// GetBlob's reader fails at its end when the bytes are not the digest's.
type Blobs interface {
	PutBlob(ctx context.Context, digest string, r io.Reader) error
	GetBlob(ctx context.Context, digest string) (io.ReadCloser, error)
}

// maxManifestBytes bounds an image manifest read back from the blobs.
const maxManifestBytes = 4 << 20

// SetBlobs makes the importer publish every image it stages into b (its
// config, its layers, and its manifest last, each a blob by its own
// digest), and lets Fetch bring images from b. A staged image whose
// blobs cannot be stored is refused: nodes could not start it.
func (im *Importer) SetBlobs(b Blobs) { im.blobs = b }

// publish stores the parts of the image a was read from as blobs: the
// manifest, named by the image's digest, is stored last, so a manifest
// found in the blobs names parts that are there.
func (im *Importer) publish(ctx context.Context, a Archive) error {
	if im.blobs == nil {
		return nil
	}
	raw, err := a.Image.RawManifest()
	if err != nil {
		return fmt.Errorf("publish image %s: %w", a.Digest, err)
	}
	m, err := a.Image.Manifest()
	if err != nil {
		return fmt.Errorf("publish image %s: %w", a.Digest, err)
	}
	cfg, err := a.Image.RawConfigFile()
	if err != nil {
		return fmt.Errorf("publish image %s: %w", a.Digest, err)
	}
	if err := im.blobs.PutBlob(ctx, m.Config.Digest.String(), bytes.NewReader(cfg)); err != nil {
		return fmt.Errorf("publish the config of image %s: %w", a.Digest, err)
	}
	for _, d := range m.Layers {
		if err := im.putLayer(ctx, a.Image, d.Digest); err != nil {
			return fmt.Errorf("publish layer %s of image %s: %w", d.Digest, a.Digest, err)
		}
	}
	if err := im.blobs.PutBlob(ctx, a.Digest.String(), bytes.NewReader(raw)); err != nil {
		return fmt.Errorf("publish the manifest of image %s: %w", a.Digest, err)
	}
	im.log.Info("image published to the blobs", "digest", a.Digest.String(), "layers", len(m.Layers))
	return nil
}

func (im *Importer) putLayer(ctx context.Context, img v1.Image, digest v1.Hash) error {
	l, err := img.LayerByDigest(digest)
	if err != nil {
		return err
	}
	rc, err := l.Compressed()
	if err != nil {
		return err
	}
	defer rc.Close()
	return im.blobs.PutBlob(ctx, digest.String(), rc)
}

// Fetch returns the stored image of digest ("sha256:…"), bringing it from
// the blobs first when this images dir does not have it: the manifest
// blob (whose bytes are the digest's), then the config and layers it
// names, each checked against its own digest, are imported as an OCI
// layout with every rule of an upload. A blob whose bytes do not match
// refuses the image and leaves nothing in the images dir. Fetches of one
// image at once in this process download it once; other processes
// sharing the images dir each stage their own copy, and one is stored.
func (im *Importer) Fetch(ctx context.Context, digest string) (image.Image, error) {
	if img, err := im.Load(digest); err == nil {
		return img, nil
	}
	if im.blobs == nil {
		return image.Image{}, api.Errorf(api.CodeNotFound, "image %s is not on this node and it has no store to fetch it from", digest)
	}
	h, err := v1.NewHash(digest)
	if err != nil || h.Algorithm != "sha256" {
		return image.Image{}, api.Errorf(api.CodeInvalidArgument, "image digest %q is not sha256:<hex>", digest)
	}
	// One fetch of an image at a time in this process; the others find
	// it stored.
	unlock := im.fetching.Lock(digest)
	defer unlock()
	if img, err := im.Load(digest); err == nil {
		return img, nil
	}
	raw, err := im.readBlob(ctx, digest, maxManifestBytes)
	if err != nil {
		return image.Image{}, fmt.Errorf("fetch image %s: its manifest: %w", digest, err)
	}
	m, err := v1.ParseManifest(bytes.NewReader(raw))
	if err != nil {
		return image.Image{}, fmt.Errorf("fetch image %s: read its manifest: %w", digest, err)
	}
	mt := m.MediaType
	if mt == "" {
		mt = types.OCIManifestSchema1
	}
	pr, pw := io.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		pw.CloseWithError(im.writeLayout(ctx, pw, h, mt, raw, m))
	}()
	// Staged without publishing: the blobs are where it came from.
	st, err := im.stage(ctx, pr, false)
	pr.CloseWithError(errors.New("import ended"))
	<-done
	if err != nil {
		return image.Image{}, fmt.Errorf("fetch image %s: %w", digest, err)
	}
	img, _, err := im.commit(ctx, st)
	if err != nil {
		return image.Image{}, fmt.Errorf("fetch image %s: %w", digest, err)
	}
	if img.Config.Digest != digest {
		return image.Image{}, fmt.Errorf("fetch image %s: the blobs hold image %s", digest, img.Config.Digest)
	}
	im.log.Info("image fetched from the blobs", "digest", digest)
	return img, nil
}

// readBlob reads a whole blob of at most max bytes, its digest checked.
func (im *Importer) readBlob(ctx context.Context, digest string, max int64) ([]byte, error) {
	rc, err := im.blobs.GetBlob(ctx, digest)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("blob %s is over %d bytes", digest, max)
	}
	return b, nil
}

// writeLayout writes an OCI image layout archive of the image whose
// manifest is raw to w, its blobs streamed from the store.
func (im *Importer) writeLayout(ctx context.Context, w io.Writer, digest v1.Hash, mt types.MediaType, raw []byte, m *v1.Manifest) error {
	tw := tar.NewWriter(w)
	file := func(name string, b []byte) error {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(b)), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		_, err := tw.Write(b)
		return err
	}
	index, err := json.Marshal(v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex,
		Manifests: []v1.Descriptor{{MediaType: mt, Digest: digest, Size: int64(len(raw))}}})
	if err != nil {
		return err
	}
	if err := file("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)); err != nil {
		return err
	}
	if err := file("index.json", index); err != nil {
		return err
	}
	if err := file(blobPath(digest.String()), raw); err != nil {
		return err
	}
	for _, d := range append([]v1.Descriptor{m.Config}, m.Layers...) {
		if err := im.copyBlob(ctx, tw, d); err != nil {
			return err
		}
	}
	return tw.Close()
}

// copyBlob writes the blob of d into tw, refusing one whose size or
// bytes are not what d says.
func (im *Importer) copyBlob(ctx context.Context, tw *tar.Writer, d v1.Descriptor) error {
	if d.Digest.Algorithm != "sha256" || d.Size < 0 {
		return api.Errorf(api.CodeInvalidArgument, "the manifest names blob %s of %d bytes: want a sha256 digest", d.Digest, d.Size)
	}
	rc, err := im.blobs.GetBlob(ctx, d.Digest.String())
	if err != nil {
		return fmt.Errorf("blob %s: %w", d.Digest, err)
	}
	defer rc.Close()
	if err := tw.WriteHeader(&tar.Header{Name: blobPath(d.Digest.String()), Mode: 0o644, Size: d.Size, Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	if _, err := io.CopyN(tw, rc, d.Size); err != nil {
		return fmt.Errorf("blob %s: %w", d.Digest, err)
	}
	// Read to the end: the digest is checked there.
	if n, err := io.Copy(io.Discard, rc); err != nil {
		return err
	} else if n > 0 {
		return fmt.Errorf("blob %s is longer than the %d bytes its manifest says", d.Digest, d.Size)
	}
	return nil
}

func blobPath(digest string) string { return "blobs/" + strings.Replace(digest, ":", "/", 1) }
