package sources

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
	cove "github.com/cove-dev/cove/sdk/go"
)

// blobFiles lists what the server keeps on disk for a team's assets.
func blobFiles(t *testing.T, s *e2etest.Server, teamID string) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(s.DataDir, "assets", teamID))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// TestAssets: an asset's bytes are kept once however often they are sent;
// two sandboxes start from one asset; a sandbox's folder saved as an
// asset comes back whole (digest-checked) and starts a third sandbox;
// deleted, it is gone; hostile archives are never kept.
func TestAssets(t *testing.T) {
	s := e2etest.StartServer(t, e2etest.WithArgs("--warm-pool", "0"))
	c := s.Admin
	ctx := t.Context()

	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "lib/empty"), 0o755)
	os.WriteFile(filepath.Join(dir, "lib/tool.sh"), []byte("#!/bin/sh\necho tool\n"), 0o755)
	os.Symlink("lib/tool.sh", filepath.Join(dir, "tool"))
	var archive bytes.Buffer
	if err := cove.WriteDirArchive(&archive, dir, nil); err != nil {
		t.Fatal(err)
	}
	a1, err := c.CreateAsset(ctx, "toolkit", bytes.NewReader(archive.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	a2, err := c.CreateAsset(ctx, "again", bytes.NewReader(archive.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if a1.ID != a2.ID || a1.Size != int64(archive.Len()) || len(a1.SHA256) != 64 {
		t.Fatalf("same bytes twice: %+v and %+v", a1, a2)
	}
	team := a1.TeamID
	if files := blobFiles(t, s, team); len(files) != 1 || files[0] != a1.SHA256 {
		t.Fatalf("bytes on disk: %v; want one file named %s", files, a1.SHA256)
	}
	l, err := c.ListAssets(ctx, 0, "")
	if err != nil || len(l.Items) != 1 {
		t.Fatalf("list: %+v, %v", l, err)
	}

	// Two sandboxes from one asset.
	for range 2 {
		sb := e2etest.Create(t, c, api.CreateSandboxRequest{Source: &api.Source{Type: api.SourceAsset, AssetID: a1.ID}})
		if sb.Source == nil || sb.Source.Digest != a1.SHA256 {
			t.Fatalf("sandbox source: %+v", sb.Source)
		}
		if out := e2etest.MustOK(t, c, sb.ID, "cd /workspace && ./tool && test -d lib/empty && stat -c '%U %a' lib/tool.sh"); out != "tool\nuser 755\n" {
			t.Fatalf("files from the asset: %q", out)
		}
	}

	// A folder of a sandbox saved as an asset, downloaded, and used again.
	sb := e2etest.Create(t, c, api.CreateSandboxRequest{})
	e2etest.MustOK(t, c, sb.ID, "mkdir -p /workspace/out/sub && echo result > /workspace/out/sub/r.txt && ln -s sub/r.txt /workspace/out/latest")
	saved, err := c.SaveAsset(ctx, sb.ID, api.SaveAssetRequest{Path: "/workspace/out", Name: "results"})
	if err != nil {
		t.Fatal(err)
	}
	rd, err := c.ReadAsset(ctx, saved.ID)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(rd)
	rd.Close()
	if err != nil || int64(len(b)) != saved.Size {
		t.Fatalf("download: %d bytes of %d, %v", len(b), saved.Size, err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, strings.TrimSuffix(h.Name, "/"))
	}
	if got := strings.Join(names, ","); !strings.Contains(got, "sub/r.txt") || !strings.Contains(got, "latest") {
		t.Fatalf("saved asset has %v", names)
	}
	sb3 := e2etest.Create(t, c, api.CreateSandboxRequest{Source: &api.Source{Type: api.SourceAsset, AssetID: saved.ID}})
	if out := e2etest.MustOK(t, c, sb3.ID, "cat /workspace/latest"); out != "result\n" {
		t.Fatalf("sandbox from the saved asset: %q", out)
	}

	// Deleted: gone, bytes too; a create naming it is refused, nothing made.
	if err := c.DeleteAsset(ctx, saved.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetAsset(ctx, saved.ID); api.ErrorCode(err) != api.CodeNotFound {
		t.Fatalf("get after delete: %v", err)
	}
	before, _ := c.ListSandboxes(ctx, cove.SandboxQuery{})
	_, err = c.CreateSandbox(ctx, api.CreateSandboxRequest{Source: &api.Source{Type: api.SourceAsset, AssetID: saved.ID}}, false)
	if api.ErrorCode(err) != api.CodeNotFound || !strings.Contains(err.Error(), "asset") {
		t.Fatalf("create from a deleted asset: %v", err)
	}
	after, _ := c.ListSandboxes(ctx, cove.SandboxQuery{})
	if len(after.Items) != len(before.Items) {
		t.Fatalf("a refused create made a sandbox")
	}

	// Hostile archives are refused and leave nothing on disk.
	for _, bad := range [][]byte{
		tarGz(t, tar.Header{Name: "../x", Typeflag: tar.TypeReg}),
		tarGz(t, tar.Header{Name: "/abs", Typeflag: tar.TypeReg}),
		tarGz(t, tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "../../etc/passwd"}),
		[]byte("not an archive"),
	} {
		if _, err := c.CreateAsset(ctx, "bad", bytes.NewReader(bad)); api.ErrorCode(err) != api.CodeInvalidArgument {
			t.Fatalf("hostile asset: %v; want invalid_argument", err)
		}
	}
	if files := blobFiles(t, s, team); len(files) != 1 {
		t.Fatalf("bytes on disk after refusals: %v", files)
	}

}
