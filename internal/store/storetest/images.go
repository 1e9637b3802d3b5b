package storetest

import (
	"testing"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/store"
)

func testImages(t *testing.T, s store.Store) {
	ctx := t.Context()
	createTeam(t, s, "team_a")
	two := int64(2)
	img := api.Image{
		ID: "img_1", Name: "tools", TeamID: "team_a", Digest: "sha256:aa", SizeBytes: 10,
		Config: api.ImageConfig{Env: []string{"A=1"}, WorkingDir: "/w", User: "app", Entrypoint: []string{},
			Cmd: []string{"sh"}, Labels: map[string]string{"k": "v"}, UID: 1234, GID: 1234, Shell: []string{"/bin/sh", "-c"}},
		Defaults:  api.ImageDefaults{Resources: &api.ResourcesRequest{CPUs: ptr(0.5)}, IdleTimeoutS: &two},
		Admission: api.ImageAdmission{Mode: api.ImageAdmitOwner, Teams: []string{}},
		Examples:  []string{"ls"}, CreatedAt: at(1), UpdatedAt: at(1),
	}
	mustDo(t, s.CreateImage(ctx, img))
	same := img
	same.ID, same.Name = "img_2", "tools-again"
	mustDo(t, s.CreateImage(ctx, same))
	dup := img
	dup.ID = "img_3"
	wantCode(t, s.CreateImage(ctx, dup), api.CodeConflict)
	// Names are per team: another team may have its own "tools".
	createTeam(t, s, "team_b")
	other := img
	other.ID, other.TeamID, other.Digest = "img_5", "team_b", "sha256:bb"
	mustDo(t, s.CreateImage(ctx, other))
	diff(t, "GetImageByName of team b", other, mustGet[api.Image](t)(s.GetImageByName(ctx, "team_b", "tools")))
	_, err := s.GetImageByName(ctx, "team_b", "tools-again")
	wantCode(t, err, api.CodeNotFound)
	orphan := img
	orphan.ID, orphan.Name, orphan.TeamID = "img_4", "orphan", "team_none"
	wantCode(t, s.CreateImage(ctx, orphan), api.CodeNotFound)

	diff(t, "GetImage", img, mustGet[api.Image](t)(s.GetImage(ctx, "img_1")))
	diff(t, "GetImageByName", same, mustGet[api.Image](t)(s.GetImageByName(ctx, "team_a", "tools-again")))
	_, err = s.GetImageByName(ctx, "team_a", "nope")
	wantCode(t, err, api.CodeNotFound)
	diff(t, "ListImages", []api.Image{img, other, same}, mustGet[[]api.Image](t)(s.ListImages(ctx)))
	if n := mustGet[int](t)(s.ImagesWithDigest(ctx, "sha256:aa")); n != 2 {
		t.Errorf("ImagesWithDigest = %d; want 2", n)
	}

	upd := img
	upd.Admission = api.ImageAdmission{Mode: api.ImageAdmitTeams, Teams: []string{"team_b"}}
	upd.Examples = []string{"pwd"}
	upd.UpdatedAt = at(2)
	mustDo(t, s.UpdateImage(ctx, upd))
	diff(t, "GetImage after update", upd, mustGet[api.Image](t)(s.GetImage(ctx, "img_1")))

	sb := sandbox("team_a", 1, "", api.StateRunning)
	sb.Template = "tools"
	sb = createSandbox(t, s, sb)
	if !mustGet[bool](t)(s.TemplateInUse(ctx, "team_a", "tools", "a/tools")) {
		t.Error("TemplateInUse of a running sandbox's template = false")
	}
	if mustGet[bool](t)(s.TemplateInUse(ctx, "team_b", "tools", "b/tools")) {
		t.Error("TemplateInUse of another team's image of the same name = true")
	}
	shared := sandbox("team_b", 2, "", api.StateRunning)
	shared.Template = "a/tools-again"
	createSandbox(t, s, shared)
	if !mustGet[bool](t)(s.TemplateInUse(ctx, "team_a", "tools-again", "a/tools-again")) {
		t.Error("TemplateInUse of an image another team's sandbox names qualified = false")
	}
	sb.State = api.StateTerminated
	mustDo(t, s.UpdateSandbox(ctx, sb))
	sb.Version++
	if mustGet[bool](t)(s.TemplateInUse(ctx, "team_a", "tools", "a/tools")) {
		t.Error("TemplateInUse after its sandbox terminated = true")
	}

	mustDo(t, s.DeleteImage(ctx, "img_1"))
	wantCode(t, s.DeleteImage(ctx, "img_1"), api.CodeNotFound)
	if n := mustGet[int](t)(s.ImagesWithDigest(ctx, "sha256:aa")); n != 1 {
		t.Errorf("ImagesWithDigest after delete = %d; want 1", n)
	}
}
