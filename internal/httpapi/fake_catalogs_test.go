package httpapi

import (
	"context"
	"io"
	"net"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/lifecycle"
)

// The fake control plane serves as the image, template and preview
// services too: each call is recorded with the team it acts for, and
// answers not_found (an empty list for lists).

var (
	_ ImageService    = (*fakeControlPlane)(nil)
	_ TemplateService = (*fakeControlPlane)(nil)
	_ PreviewService  = (*fakeControlPlane)(nil)
)

func (f *fakeControlPlane) ImportImage(ctx context.Context, t api.Team, name string, settings api.ImageSettings, body io.Reader) (api.Image, error) {
	f.record("ImportImage", t.ID)
	io.Copy(io.Discard, body)
	return api.Image{}, notFound("team", t.ID)
}

func (f *fakeControlPlane) ListImages(ctx context.Context, t api.Team) (api.List[api.Image], error) {
	f.record("ListImages", t.ID)
	return api.List[api.Image]{Items: []api.Image{}}, nil
}

func (f *fakeControlPlane) GetImage(ctx context.Context, t api.Team, ref string) (api.Image, error) {
	f.record("GetImage", t.ID)
	return api.Image{}, notFound("image", ref)
}

func (f *fakeControlPlane) UpdateImage(ctx context.Context, t api.Team, ref string, st api.ImageSettings) (api.Image, error) {
	f.record("UpdateImage", t.ID)
	return api.Image{}, notFound("image", ref)
}

func (f *fakeControlPlane) DeleteImage(ctx context.Context, t api.Team, ref string) error {
	f.record("DeleteImage", t.ID)
	return notFound("image", ref)
}

func (f *fakeControlPlane) ListTemplates(ctx context.Context, teamID string) (api.List[api.Template], error) {
	f.record("ListTemplates", teamID)
	return api.List[api.Template]{Items: []api.Template{}}, nil
}

func (f *fakeControlPlane) TemplateHealth() map[string]string { return map[string]string{} }

func (f *fakeControlPlane) CreatePreview(ctx context.Context, teamID, ref string, req api.CreatePreviewRequest) (api.Preview, error) {
	f.record("CreatePreview", teamID)
	return api.Preview{}, notFound("sandbox", ref)
}

func (f *fakeControlPlane) ListPreviews(ctx context.Context, teamID, ref string) (api.List[api.Preview], error) {
	f.record("ListPreviews", teamID)
	return api.List[api.Preview]{}, notFound("sandbox", ref)
}

func (f *fakeControlPlane) DeletePreview(ctx context.Context, teamID, ref, previewID string) error {
	f.record("DeletePreview", teamID)
	return notFound("sandbox", ref)
}

func (f *fakeControlPlane) OpenPreview(ctx context.Context, sandboxID string, port int, tokens []string) (api.Preview, error) {
	return api.Preview{}, notFound("sandbox", sandboxID)
}

func (f *fakeControlPlane) DialPreview(ctx context.Context, sandboxID string, port int) (net.Conn, error) {
	return nil, notFound("sandbox", sandboxID)
}

func (f *fakeControlPlane) RedeemPreviewLink(ctx context.Context, sandboxID string, port int, code string) (string, error) {
	return "", notFound("sandbox", sandboxID)
}

func (f *fakeControlPlane) TeamMe(ctx context.Context, p lifecycle.Principal) (api.TeamMe, error) {
	f.record("TeamMe", p.Team.ID)
	return api.TeamMe{Team: p.Team}, nil
}
