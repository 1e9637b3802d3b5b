package images

import (
	"errors"
	"strings"
	"testing"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
	it "github.com/cove-dev/cove/internal/images/imagetest"
	cove "github.com/cove-dev/cove/sdk/go"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// TestImageNamesPerTeam, as two tenants with their own keys: each team
// imports an image called x and each team's sandbox from x runs its own;
// the name of another team's private image is 404, says nothing of it,
// and names neither its ID nor its team; once shared, another team
// reaches it as TEAM/x (while its own x stays its own), and the owner
// cannot delete it from under that team's sandbox.
func TestImageNamesPerTeam(t *testing.T) {
	s := startServer(t)
	ctx := t.Context()
	a, _ := s.team(t, "names-a", imagesAdmission)
	b, bID := s.team(t, "names-b", imagesAdmission)
	aName := "names-a-" + e2etest.RunID()
	const x = "x"
	build := func(who string) string {
		return archive(t, it.Image(t, v1.Config{Env: []string{"WHO=" + who}}, it.Busybox(t, false, "", "")), true)
	}
	imgA := mustImport(t, a, x, build("a"), nil)
	imgB := mustImport(t, b, x, build("b"), nil)
	if imgA.ID == imgB.ID || imgA.Digest == imgB.Digest {
		t.Fatalf("the two teams' images are one: %+v, %+v", imgA, imgB)
	}
	if imgA.Template != x || imgB.Template != x {
		t.Errorf("templates of own images: %q, %q; want %q", imgA.Template, imgB.Template, x)
	}
	// run reports which team's image sandbox sb runs.
	run := func(t *testing.T, c *cove.Client, sb api.Sandbox) string {
		t.Helper()
		return strings.TrimSpace(e2etest.MustOK(t, c, sb.ID, `echo "$WHO"`))
	}
	sbA := e2etest.Create(t, a, api.CreateSandboxRequest{Template: x})
	sbB := e2etest.Create(t, b, api.CreateSandboxRequest{Template: x})
	if got := run(t, a, sbA); got != "a" {
		t.Errorf("team a's sandbox from x runs image %q", got)
	}
	if got := run(t, b, sbB); got != "b" {
		t.Errorf("team b's sandbox from x runs image %q", got)
	}
	// A second import of the same name in one team is refused, naming
	// only that team.
	_, err := importFile(t, b, x, build("b2"), nil)
	wantCode(t, err, api.CodeConflict, "this team has an image called")

	// A's image is private: by its qualified name it is not found, and the
	// answer is the one for a name that does not exist at all.
	qualified := aName + "/" + x
	_, errPrivate := b.GetImage(ctx, qualified)
	_, errNone := b.GetImage(ctx, aName+"/no-such-image")
	var ep, en *api.Error
	if !errors.As(errPrivate, &ep) || !errors.As(errNone, &en) || ep.Code != api.CodeNotFound || en.Code != api.CodeNotFound {
		t.Fatalf("GET %s: %v; GET of a missing one: %v; want not_found both", qualified, errPrivate, errNone)
	}
	if ep.Message != strings.Replace(en.Message, "no-such-image", x, 1) || strings.Contains(ep.Message, imgA.ID) || len(ep.Details) != len(en.Details) {
		t.Errorf("a private image's 404 %+v differs from a missing one's %+v", ep, en)
	}
	_, err = b.CreateSandbox(ctx, api.CreateSandboxRequest{Template: qualified}, false)
	wantCode(t, err, api.CodeNotFound, "does not exist")
	_, err = b.CreateSandbox(ctx, api.CreateSandboxRequest{Template: aName + "/no-such-image"}, false)
	wantCode(t, err, api.CodeNotFound, "does not exist")

	// Shared with B, A's image is B's as TEAM/x; B's x is still its own.
	if _, err := a.UpdateImage(ctx, imgA.ID, api.ImageSettings{Admission: &api.ImageAdmission{Mode: api.ImageAdmitTeams, Teams: []string{bID}}}); err != nil {
		t.Fatal(err)
	}
	got, err := b.GetImage(ctx, qualified)
	if err != nil || got.ID != imgA.ID || got.Template != qualified {
		t.Fatalf("GET %s once shared: %+v, %v", qualified, got, err)
	}
	list, err := b.Images(ctx)
	if err != nil {
		t.Fatal(err)
	}
	templates := map[string]string{}
	for _, img := range list.Items {
		templates[img.ID] = img.Template
	}
	if templates[imgA.ID] != qualified || templates[imgB.ID] != x {
		t.Errorf("team b's list names the images %v; want %s as %q and %s as %q", templates, imgA.ID, qualified, imgB.ID, x)
	}
	sbShared := e2etest.Create(t, b, api.CreateSandboxRequest{Template: qualified})
	if got := run(t, b, sbShared); got != "a" {
		t.Errorf("team b's sandbox from %s runs image %q; want a's", qualified, got)
	}
	sbOwn := e2etest.Create(t, b, api.CreateSandboxRequest{Template: x})
	if got := run(t, b, sbOwn); got != "b" {
		t.Errorf("team b's sandbox from x, with a's shared, runs image %q", got)
	}
	// The owner's delete waits for the other team's sandbox, not only
	// for its own.
	if _, err := a.TerminateSandbox(ctx, sbA.ID); err != nil {
		t.Fatal(err)
	}
	err = a.DeleteImage(ctx, imgA.ID)
	wantCode(t, err, api.CodeConflict, "used by sandboxes")
}
