package transfer

import (
	"bytes"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/random"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/node/saves"
	"github.com/cove-dev/cove/internal/store/sqlite"
	"github.com/cove-dev/cove/internal/testsupport/pgserver"
)

// publish puts an image's parts into b as the importer does: config,
// layers, then the manifest under the image's digest.
func publish(t *testing.T, b saves.Blobs, img v1.Image) string {
	t.Helper()
	ctx := t.Context()
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ := img.RawConfigFile()
	if err := b.PutBlob(ctx, m.Config.Digest.String(), bytes.NewReader(cfg)); err != nil {
		t.Fatal(err)
	}
	for _, l := range m.Layers {
		layer, err := img.LayerByDigest(l.Digest)
		if err != nil {
			t.Fatal(err)
		}
		rc, err := layer.Compressed()
		if err != nil {
			t.Fatal(err)
		}
		err = b.PutBlob(ctx, l.Digest.String(), rc)
		rc.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	raw, _ := img.RawManifest()
	d, _ := img.Digest()
	if err := b.PutBlob(ctx, d.String(), bytes.NewReader(raw)); err != nil {
		t.Fatal(err)
	}
	return d.String()
}

// TestMoveImages: an imported image whose parts serve kept in its save
// store arrives in the target whole (its config, every layer, its
// manifest, each read back under its digest); one imported before serve
// kept parts is listed, not moved.
func TestMoveImages(t *testing.T) {
	ctx := t.Context()
	_, to, srv := newSaves(t)
	in := newInstall(t)
	kept, err := random.Image(2048, 2)
	if err != nil {
		t.Fatal(err)
	}
	keptDigest := publish(t, in.saves, kept)
	lost, err := random.Image(512, 1)
	if err != nil {
		t.Fatal(err)
	}
	lostDigest, _ := lost.Digest()
	st, err := sqlite.Open(ctx, in.db)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	for i, d := range []string{keptDigest, lostDigest.String()} {
		if err := st.CreateImage(ctx, api.Image{ID: []string{"img_kept", "img_lost"}[i], Name: []string{"kept", "lost"}[i],
			TeamID: "team_1", Digest: d, CreatedAt: now, UpdatedAt: now}); err != nil {
			t.Fatal(err)
		}
	}
	st.Close()

	rep, err := Run(ctx, Config{From: "sqlite:" + in.db, To: pgserver.Start(t).NewDatabase(t), Saves: srv.PrefixURL("cove"), VolumesNode: "node-a"})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Images) != 1 || rep.Images[0] != keptDigest || len(rep.ImagesWithoutBlobs) != 1 || rep.ImagesWithoutBlobs[0] != lostDigest.String() {
		t.Fatalf("report: moved %v, without parts %v; want %s moved and %s listed", rep.Images, rep.ImagesWithoutBlobs, keptDigest, lostDigest)
	}
	m, _ := kept.Manifest()
	for _, d := range append([]v1.Descriptor{m.Config}, m.Layers...) {
		if ok, err := hasBlob(ctx, to, d.Digest.String()); err != nil || !ok {
			t.Errorf("part %s of the moved image is not in the target (%v)", d.Digest, err)
		}
	}
	raw, err := readBlob(ctx, to, keptDigest)
	if want, _ := kept.RawManifest(); err != nil || !bytes.Equal(raw, want) {
		t.Errorf("the moved manifest: %v; want the image's bytes", err)
	}
	if ok, _ := hasBlob(ctx, to, lostDigest.String()); ok {
		t.Error("the image without parts has a manifest in the target")
	}
}
