package snapshots

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
	it "github.com/cove-dev/cove/internal/images/imagetest"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// TestImageKept: an imported image that snapshots hold changes to is not
// deleted even when no sandbox runs it: 409 naming the owner team's
// snapshot and counting, without naming, another team's (the image is
// shared with it) until both are gone; a
// sandbox started on the snapshot afterwards has the image's files and
// the snapshot's. Once the snapshots are gone the image is deleted.
func TestImageKept(t *testing.T) {
	s := e2etest.StartServer(t, e2etest.WithArgs("--warm-pool", "0"))
	c, ctx := s.Admin, t.Context()
	img := it.Image(t, v1.Config{Env: []string{"PATH=/bin"}, WorkingDir: "/work"},
		it.Busybox(t, false, "", ""),
		it.Layer(t, it.Dir("data", 0o755), it.File("data/hello", "from the image\n", 0o644)))
	path := filepath.Join(t.TempDir(), "image.tar")
	it.OCIArchive(t, img, path, nil)
	file, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	image, err := c.ImportImage(ctx, "kept-"+e2etest.RunID(), nil, file)
	file.Close()
	if err != nil {
		t.Fatalf("import: %v", err)
	}

	sb := e2etest.Create(t, c, api.CreateSandboxRequest{Template: image.Template})
	e2etest.MustOK(t, c, sb.ID, "echo from the snapshot > /work/note")
	snap, err := c.CreateSnapshot(ctx, sb.ID, "on-image")
	if err != nil {
		t.Fatal(err)
	}
	terminate(t, c, sb.ID)
	// Another team the image is shared with has a snapshot on it too.
	b := s.NewTeam("kept-b-" + e2etest.RunID())
	me, err := b.Admission(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.SetAdmission(ctx, me.Team.ID, api.Admission{ManagedEnvironment: true, CustomImages: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.UpdateImage(ctx, image.ID, api.ImageSettings{Admission: &api.ImageAdmission{Mode: api.ImageAdmitTeams, Teams: []string{me.Team.ID}}}); err != nil {
		t.Fatal(err)
	}
	shared, err := b.GetImage(ctx, image.ID)
	if err != nil {
		t.Fatal(err)
	}
	bsb := e2etest.Create(t, b, api.CreateSandboxRequest{Template: shared.Template})
	bsnap, err := b.CreateSnapshot(ctx, bsb.ID, "b-on-image")
	if err != nil {
		t.Fatal(err)
	}
	terminate(t, b, bsb.ID)

	// No sandbox runs the image; the snapshots still need it. The other
	// team's is counted, not named.
	err = c.DeleteImage(ctx, image.ID)
	if api.ErrorCode(err) != api.CodeConflict || !strings.Contains(err.Error(), snap.ID) || !strings.Contains(err.Error(), "1 of other teams") ||
		strings.Contains(err.Error(), bsnap.ID) {
		t.Fatalf("delete of an image snapshots hold changes to: %v, want 409 naming %s, counting 1 of another team's and not naming it", err, snap.ID)
	}
	code, _, body := e2etest.RawRequest(t, "DELETE", s.URL+"/v1/images/"+image.ID, s.AdminKey, "")
	if code != 409 || !strings.Contains(string(body), `"code":"conflict"`) {
		t.Errorf("the raw answer: %d %s", code, body)
	}
	on := e2etest.Create(t, c, api.CreateSandboxRequest{Source: &api.Source{Type: api.SourceSnapshot, SnapshotID: snap.ID}})
	if out := e2etest.MustOK(t, c, on.ID, "cat /data/hello /work/note"); out != "from the image\nfrom the snapshot\n" {
		t.Errorf("a sandbox on the snapshot after the refused delete: %q", out)
	}
	terminate(t, c, on.ID)

	if err := c.DeleteSnapshot(ctx, snap.ID); err != nil {
		t.Fatal(err)
	}
	err = c.DeleteImage(ctx, image.ID)
	if api.ErrorCode(err) != api.CodeConflict || !strings.Contains(err.Error(), "1 of other teams") || strings.Contains(err.Error(), bsnap.ID) {
		t.Fatalf("delete of an image only another team's snapshot holds changes to: %v, want 409 counting it", err)
	}
	if err := b.DeleteSnapshot(ctx, bsnap.ID); err != nil {
		t.Fatal(err)
	}
	var derr error
	for i := 0; i < 100; i++ {
		// A sandbox ending is recorded before its image is free.
		if derr = c.DeleteImage(ctx, image.ID); api.ErrorCode(derr) != api.CodeConflict {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if derr != nil {
		t.Fatalf("delete of the image once its snapshot is gone: %v", derr)
	}
}
