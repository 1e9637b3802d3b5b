package replicas

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
	cove "github.com/cove-dev/cove/sdk/go"
)

// TestAssetsAcrossReplicas: an asset uploaded through replica A is read
// back through replica B byte for byte, under its digest, and a sandbox
// made through B starts from it; another team reaches it through
// neither replica.
func TestAssetsAcrossReplicas(t *testing.T) {
	f, _ := startFleet(t)
	a, b := f.Controls[0], f.Controls[1]
	ctx := t.Context()
	run := e2etest.RunID()

	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "hello.txt"), []byte("from replica a "+run+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var archive bytes.Buffer
	if err := cove.WriteDirArchive(&archive, dir, nil); err != nil {
		t.Fatal(err)
	}
	asset, err := a.Admin.CreateAsset(ctx, "shared-"+run, bytes.NewReader(archive.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(archive.Bytes())
	if asset.SHA256 != hex.EncodeToString(sum[:]) {
		t.Fatalf("asset digest %s; the bytes' is %x", asset.SHA256, sum)
	}

	rd, err := b.Admin.ReadAsset(ctx, asset.ID)
	if err != nil {
		t.Fatalf("read through replica b: %v", err)
	}
	got, err := io.ReadAll(rd)
	rd.Close()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, archive.Bytes()) {
		t.Fatalf("replica b served %d other bytes (of %d)", len(got), archive.Len())
	}

	sb := e2etest.Create(t, b.Admin, api.CreateSandboxRequest{Name: "asset-" + run, Source: &api.Source{Type: api.SourceAsset, AssetID: asset.ID}})
	if sb.Source == nil || sb.Source.Digest != asset.SHA256 {
		t.Fatalf("sandbox source: %+v", sb.Source)
	}
	if out := e2etest.MustOK(t, b.Admin, sb.ID, "cat /workspace/hello.txt"); out != "from replica a "+run+"\n" {
		t.Fatalf("file from the asset: %q", out)
	}

	// Another team: not through A, not through B.
	other, err := b.Admin.CreateTeam(ctx, "other-"+run)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range f.Controls {
		oc := cove.New(c.URL, other.APIKey)
		if _, err := oc.ReadAsset(ctx, asset.ID); api.ErrorCode(err) != api.CodeNotFound {
			t.Fatalf("another team read the asset at %s: %v", c.URL, err)
		}
		if _, err := oc.CreateSandbox(ctx, api.CreateSandboxRequest{Source: &api.Source{Type: api.SourceAsset, AssetID: asset.ID}}, false); api.ErrorCode(err) != api.CodeNotFound {
			t.Fatalf("another team started from the asset at %s: %v", c.URL, err)
		}
	}
}
