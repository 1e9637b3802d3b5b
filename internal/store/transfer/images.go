package transfer

import (
	"bytes"
	"context"
	"fmt"
	"io"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/node/saves"
)

// maxManifestBytes bounds an image manifest read from the source.
const maxManifestBytes = 4 << 20

// moveImages copies, for every imported image the source lists that the
// target save store lacks, its parts from the source's save store (where
// `cove serve` publishes what it imports): the config and the layers,
// then the manifest, so a manifest found in the target names parts that
// are there. It returns the images moved and those whose parts the
// source does not have (imported before serve kept them).
func moveImages(ctx context.Context, src *source, from, to saves.Blobs) (moved, missing []string, err error) {
	digests, err := queryStrings(ctx, src.db, "SELECT DISTINCT digest FROM images ORDER BY digest")
	if err != nil {
		return nil, nil, err
	}
	for _, d := range digests {
		if ok, err := hasBlob(ctx, to, d); err != nil {
			return nil, nil, fmt.Errorf("image %s in the target save store: %w", d, err)
		} else if ok {
			continue
		}
		if from == nil {
			missing = append(missing, d)
			continue
		}
		raw, err := readBlob(ctx, from, d)
		if api.ErrorCode(err) == api.CodeNotFound {
			missing = append(missing, d)
			continue
		}
		if err != nil {
			return nil, nil, fmt.Errorf("image %s in the source save store: %w", d, err)
		}
		m, err := v1.ParseManifest(bytes.NewReader(raw))
		if err != nil {
			return nil, nil, fmt.Errorf("image %s: its manifest: %w", d, err)
		}
		parts := append([]v1.Descriptor{m.Config}, m.Layers...)
		for _, p := range parts {
			if err := copyBlob(ctx, from, to, p.Digest.String()); err != nil {
				return nil, nil, fmt.Errorf("image %s: part %s: %w", d, p.Digest, err)
			}
		}
		if err := to.PutBlob(ctx, d, bytes.NewReader(raw)); err != nil {
			return nil, nil, fmt.Errorf("image %s: its manifest: %w", d, err)
		}
		moved = append(moved, d)
	}
	return moved, missing, nil
}

func hasBlob(ctx context.Context, b saves.Blobs, digest string) (bool, error) {
	rc, err := b.GetBlob(ctx, digest)
	switch {
	case err == nil:
		rc.Close()
		return true, nil
	case api.ErrorCode(err) == api.CodeNotFound:
		return false, nil
	default:
		return false, err
	}
}

// readBlob reads a manifest blob whole, checked against its digest.
func readBlob(ctx context.Context, b saves.Blobs, digest string) ([]byte, error) {
	rc, err := b.GetBlob(ctx, digest)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	raw, err := io.ReadAll(io.LimitReader(rc, maxManifestBytes+1))
	if err != nil {
		return nil, err
	}
	if len(raw) > maxManifestBytes {
		return nil, fmt.Errorf("manifest larger than %d bytes", maxManifestBytes)
	}
	return raw, nil
}

// copyBlob copies one blob the target lacks; the target checks the
// bytes against the digest as they arrive.
func copyBlob(ctx context.Context, from, to saves.Blobs, digest string) error {
	if ok, err := hasBlob(ctx, to, digest); err != nil || ok {
		return err
	}
	rc, err := from.GetBlob(ctx, digest)
	if err != nil {
		return err
	}
	defer rc.Close()
	return to.PutBlob(ctx, digest, rc)
}
