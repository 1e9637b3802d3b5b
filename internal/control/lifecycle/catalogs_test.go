package lifecycle_test

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/cove-dev/cove/api"
)

// oneImage is an importer whose every archive is the same small tree.
type oneImage struct{ trees map[string]bool }

func (im *oneImage) StageImage(ctx context.Context, r io.Reader) (api.Image, string, error) {
	io.Copy(io.Discard, r)
	return api.Image{Digest: "sha256:0123", SizeBytes: 1 << 20, Config: api.ImageConfig{UID: 1000, GID: 1000, Home: "/app", Shell: []string{"/bin/sh"}}}, "h", nil
}
func (im *oneImage) CommitImage(ctx context.Context, handle string) (bool, error) {
	created := !im.trees["sha256:0123"]
	im.trees["sha256:0123"] = true
	return created, nil
}
func (im *oneImage) DiscardImage(handle string) {}
func (im *oneImage) RemoveImage(ctx context.Context, digest string) error {
	delete(im.trees, digest)
	return nil
}

// TestImageInUseThroughCore: the server's image catalog is wired to the
// core: an image is not deleted while a sandbox of it lives or a workload
// that names it is queued, and is once both are gone.
func TestImageInUseThroughCore(t *testing.T) {
	h := newHarness(t)
	ctx := t.Context()
	im := &oneImage{trees: map[string]bool{}}
	h.plane.Images.SetImporter(im)
	if _, err := h.plane.Teams.UpdateTeam(ctx, h.admin, h.a, api.UpdateTeamRequest{Admission: &api.Admission{ManagedEnvironment: true, CustomImages: true}}); err != nil {
		t.Fatal(err)
	}
	teamA, err := h.st.GetTeam(ctx, h.a)
	if err != nil {
		t.Fatal(err)
	}
	img, err := h.plane.Images.ImportImage(ctx, teamA, "tools", api.ImageSettings{}, strings.NewReader("archive"))
	if err != nil {
		t.Fatal(err)
	}
	sb, err := h.srv.CreateSandbox(ctx, h.a, api.CreateSandboxRequest{Template: "tools"})
	if err != nil {
		t.Fatal(err)
	}
	h.wait(t, h.a, sb.ID, api.StateRunning)
	wl, err := h.plane.Workloads.SubmitWorkload(ctx, h.a, api.CreateWorkloadRequest{Image: "tools", Command: "true"})
	if err != nil {
		t.Fatal(err)
	}
	wantCode(t, h.plane.Images.DeleteImage(ctx, teamA, img.ID), api.CodeConflict) // the sandbox
	if _, err := h.srv.TerminateSandbox(ctx, h.a, sb.ID); err != nil {
		t.Fatal(err)
	}
	h.wait(t, h.a, sb.ID, api.StateTerminated)
	wantCode(t, h.plane.Images.DeleteImage(ctx, teamA, img.ID), api.CodeConflict) // the workload
	if _, err := h.plane.Workloads.CancelWorkload(ctx, h.a, wl.ID); err != nil {
		t.Fatal(err)
	}
	if err := h.plane.Images.DeleteImage(ctx, teamA, img.ID); err != nil {
		t.Fatal(err)
	}
	if len(im.trees) != 0 {
		t.Errorf("trees left %v", im.trees)
	}
}
