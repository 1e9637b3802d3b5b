package lifecycle_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/lifecycle"
	"github.com/cove-dev/cove/internal/control/previews"
	"github.com/cove-dev/cove/internal/templates"
)

func admin(t *testing.T, h *harness) lifecycle.Principal {
	t.Helper()
	teams, err := h.st.ListTeams(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, tm := range teams {
		if tm.Name == lifecycle.AdminTeam {
			return lifecycle.Principal{Team: tm}
		}
	}
	t.Fatal("no admin team")
	return lifecycle.Principal{}
}

// TestPreviews: a preview needs the team's preview admission (a guiding
// 403 first), publishes its port on the node, lets a private request in
// only with its token, is another team's 404, and unpublishes when deleted.
func TestPreviews(t *testing.T) {
	h := newHarness(t)
	ctx := t.Context()
	sb := h.running(t, h.a, "web")
	_, err := h.plane.Previews.CreatePreview(ctx, h.a, "web", api.CreatePreviewRequest{Port: 8000})
	wantCode(t, err, api.CodePermissionDenied)
	if !strings.Contains(err.Error(), "cove teams admit team-a --preview") {
		t.Errorf("refusal %q does not say what to run", err)
	}
	if _, err := h.plane.Teams.UpdateTeam(ctx, lifecycle.Principal{Team: api.Team{ID: h.b, Name: "team-b"}}, h.a,
		api.UpdateTeamRequest{Admission: &api.Admission{Preview: true}}); api.ErrorCode(err) != api.CodePermissionDenied {
		t.Fatalf("a team changing admission: %v", err)
	}
	if _, err := h.plane.Teams.UpdateTeam(ctx, admin(t, h), h.a, api.UpdateTeamRequest{Admission: &api.Admission{ManagedEnvironment: true, Preview: true}}); err != nil {
		t.Fatal(err)
	}
	h.plane.Previews.SetURLs(previews.URLs{Domain: "preview.test:7070"})

	for _, tt := range []api.CreatePreviewRequest{{Port: 0}, {Port: 65536}, {Port: 80, Visibility: "secret"}} {
		_, err := h.plane.Previews.CreatePreview(ctx, h.a, sb.ID, tt)
		wantCode(t, err, api.CodeInvalidArgument)
	}
	p, err := h.plane.Previews.CreatePreview(ctx, h.a, "web", api.CreatePreviewRequest{Port: 8000})
	if err != nil {
		t.Fatal(err)
	}
	if p.URL != "http://8000-"+sb.ID+".preview.test:7070/" || p.Token == "" || !strings.Contains(p.Link, "cove_preview_link=") {
		t.Errorf("preview %+v", p)
	}
	if got := h.node.Published(sb.ID); !slices.Equal(got, []int{8000}) {
		t.Errorf("published %v", got)
	}
	_, err = h.plane.Previews.CreatePreview(ctx, h.a, "web", api.CreatePreviewRequest{Port: 8000})
	wantCode(t, err, api.CodeConflict)
	if _, err := h.plane.Teams.UpdateTeam(ctx, admin(t, h), h.b, api.UpdateTeamRequest{Admission: &api.Admission{Preview: true}}); err != nil {
		t.Fatal(err)
	}
	_, err = h.plane.Previews.CreatePreview(ctx, h.b, sb.ID, api.CreatePreviewRequest{Port: 9000})
	wantCode(t, err, api.CodeNotFound)

	_, err = h.plane.Previews.OpenPreview(ctx, sb.ID, 8000, nil)
	wantCode(t, err, api.CodeUnauthenticated)
	_, err = h.plane.Previews.OpenPreview(ctx, sb.ID, 8000, []string{"cpt_wrong"})
	wantCode(t, err, api.CodeUnauthenticated)
	if _, err := h.plane.Previews.OpenPreview(ctx, sb.ID, 8000, []string{p.Token}); err != nil {
		t.Errorf("with the token: %v", err)
	}
	_, err = h.plane.Previews.OpenPreview(ctx, sb.ID, 9000, []string{p.Token})
	wantCode(t, err, api.CodeNotFound)
	_, err = h.plane.Previews.OpenPreview(ctx, "web", 8000, []string{p.Token})
	wantCode(t, err, api.CodeNotFound)

	code := p.Link[strings.Index(p.Link, "=")+1:]
	if tok, err := h.plane.Previews.RedeemPreviewLink(ctx, sb.ID, 8000, code); err != nil || tok != p.Token {
		t.Errorf("redeem: %q %v", tok, err)
	}
	_, err = h.plane.Previews.RedeemPreviewLink(ctx, sb.ID, 8000, code)
	wantCode(t, err, api.CodeUnauthenticated)

	// Admission taken away: the preview stops answering.
	if _, err := h.plane.Teams.UpdateTeam(ctx, admin(t, h), h.a, api.UpdateTeamRequest{Admission: &api.Admission{ManagedEnvironment: true}}); err != nil {
		t.Fatal(err)
	}
	_, err = h.plane.Previews.OpenPreview(ctx, sb.ID, 8000, []string{p.Token})
	wantCode(t, err, api.CodePermissionDenied)

	l, err := h.plane.Previews.ListPreviews(ctx, h.a, sb.ID)
	if err != nil || len(l.Items) != 1 || l.Items[0].Token != "" {
		t.Fatalf("list %v %+v", err, l)
	}
	if err := h.plane.Previews.DeletePreview(ctx, h.b, sb.ID, p.ID); api.ErrorCode(err) != api.CodeNotFound {
		t.Errorf("another team's delete: %v", err)
	}
	if err := h.plane.Previews.DeletePreview(ctx, h.a, sb.ID, p.ID); err != nil {
		t.Fatal(err)
	}
	if got := h.node.Published(sb.ID); len(got) != 0 {
		t.Errorf("published after delete %v", got)
	}
}

// TestPreviewOfAsleepSandbox: without wake an asleep sandbox's preview
// answers unavailable and the sandbox stays asleep; with wake it runs.
func TestPreviewOfAsleepSandbox(t *testing.T) {
	h := newHarness(t)
	ctx := t.Context()
	if _, err := h.plane.Teams.UpdateTeam(ctx, admin(t, h), h.a, api.UpdateTeamRequest{Admission: &api.Admission{ManagedEnvironment: true, Preview: true}}); err != nil {
		t.Fatal(err)
	}
	sb := h.running(t, h.a, "nap")
	for _, p := range []api.CreatePreviewRequest{{Port: 1, Visibility: "public"}, {Port: 2, Visibility: "public", Wake: true}} {
		if _, err := h.plane.Previews.CreatePreview(ctx, h.a, sb.ID, p); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := h.srv.SleepSandbox(ctx, h.a, sb.ID, "test"); err != nil {
		t.Fatal(err)
	}
	h.wait(t, h.a, sb.ID, api.StateAsleep)
	_, err := h.plane.Previews.OpenPreview(ctx, sb.ID, 1, nil)
	wantCode(t, err, api.CodeUnavailable)
	if got, _ := h.srv.GetSandbox(ctx, h.a, sb.ID); got.State != api.StateAsleep {
		t.Fatalf("state %s", got.State)
	}
	if _, err := h.plane.Previews.OpenPreview(ctx, sb.ID, 2, nil); err != nil {
		t.Fatal(err)
	}
	h.wait(t, h.a, sb.ID, api.StateRunning)
}

// TestTemplateNotReady: a create on a building template answers 503 with
// a retry and the progress; a failed one says why; ready ones work.
func TestTemplateNotReady(t *testing.T) {
	h := newHarness(t)
	reg := templates.New()
	reg.Set(api.Template{Name: "managed", Kind: "managed", Status: api.TemplateBuilding, Progress: "step 3 of 9"})
	reg.Set(api.Template{Name: "other", Kind: "managed", Status: api.TemplateFailed, Reason: "no disk"})
	h.plane.Templates.SetStates(reg)
	_, err := h.srv.CreateSandbox(t.Context(), h.a, api.CreateSandboxRequest{})
	var e *api.Error
	if !asAPIError(err, &e) || e.Code != api.CodeUnavailable || e.Details["retry_after_s"] != 10 || !strings.Contains(e.Message, "step 3 of 9") {
		t.Fatalf("building: %v %+v", err, e)
	}
	_, err = h.srv.CreateSandbox(t.Context(), h.a, api.CreateSandboxRequest{Template: "other"})
	if !asAPIError(err, &e) || e.Code != api.CodeUnavailable || !strings.Contains(e.Message, "no disk") {
		t.Fatalf("failed: %v", err)
	}
	l, err := h.plane.Templates.ListTemplates(t.Context(), h.a)
	if err != nil || len(l.Items) != 2 || l.Items[0].Status != api.TemplateBuilding {
		t.Fatalf("%v %+v", err, l)
	}
	reg.Update("managed", func(tm *api.Template) { tm.Status = api.TemplateReady })
	h.running(t, h.a, "")
}

func asAPIError(err error, e **api.Error) bool { return errors.As(err, e) }

// TestPreviewCap: a sandbox publishes at most MaxPreviewsPerSandbox
// previews (409 naming the cap and how to delete one; a delete makes
// room), and each create or delete asks the node to change one port,
// never to publish every preview of the sandbox again.
func TestPreviewCap(t *testing.T) {
	h := newHarnessWith(t, func(c *lifecycle.Config) { c.MaxPreviewsPerSandbox = 3 })
	ctx := t.Context()
	if _, err := h.plane.Teams.UpdateTeam(ctx, admin(t, h), h.a, api.UpdateTeamRequest{Admission: &api.Admission{ManagedEnvironment: true, Preview: true}}); err != nil {
		t.Fatal(err)
	}
	h.plane.Previews.SetURLs(previews.URLs{Domain: "preview.test:7070"})
	sb := h.running(t, h.a, "many")
	before := len(h.node.Calls())
	var ids []string
	for port := 8000; port < 8003; port++ {
		p, err := h.plane.Previews.CreatePreview(ctx, h.a, sb.ID, api.CreatePreviewRequest{Port: port, Visibility: "public"})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, p.ID)
	}
	_, err := h.plane.Previews.CreatePreview(ctx, h.a, sb.ID, api.CreatePreviewRequest{Port: 8003, Visibility: "public"})
	wantCode(t, err, api.CodeConflict)
	if msg := err.Error(); !strings.Contains(msg, "--max-previews-per-sandbox") || !strings.Contains(msg, "DELETE /v1/sandboxes/"+sb.ID+"/previews/") {
		t.Errorf("refusal %q does not name the cap and the way out", msg)
	}
	var e *api.Error
	if errors.As(err, &e) && e.Details["limit"] != 3 {
		t.Errorf("details %v", e.Details)
	}
	if err := h.plane.Previews.DeletePreview(ctx, h.a, sb.ID, ids[1]); err != nil {
		t.Fatal(err)
	}
	if _, err := h.plane.Previews.CreatePreview(ctx, h.a, sb.ID, api.CreatePreviewRequest{Port: 8003, Visibility: "public"}); err != nil {
		t.Fatalf("after a delete: %v", err)
	}
	if got := h.node.Published(sb.ID); !slices.Equal(got, []int{8000, 8002, 8003}) {
		t.Errorf("published %v", got)
	}
	want := []string{"publish-port " + sb.ID, "publish-port " + sb.ID, "publish-port " + sb.ID, "unpublish-port " + sb.ID, "publish-port " + sb.ID}
	if got := h.node.Calls()[before:]; !slices.Equal(got, want) {
		t.Errorf("node calls %q, want %q", got, want)
	}
}
