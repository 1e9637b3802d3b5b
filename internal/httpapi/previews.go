package httpapi

import (
	"context"
	"net/http"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/lifecycle"
	"github.com/cove-dev/cove/internal/preview"
)

// PreviewService is what previews ask of the control plane
// (internal/control/previews).
type PreviewService interface {
	CreatePreview(ctx context.Context, teamID, ref string, req api.CreatePreviewRequest) (api.Preview, error)
	ListPreviews(ctx context.Context, teamID, ref string) (api.List[api.Preview], error)
	DeletePreview(ctx context.Context, teamID, ref, previewID string) error
	// preview.Backend: routing of the previews' traffic.
	preview.Backend
}

// previewRoutes serve a sandbox's previews and the templates' list.
type previewRoutes struct {
	*shared
	PreviewService  PreviewService
	TemplateService TemplateService
}

func (h previewRoutes) routes(auth authFunc) {
	auth("POST /v1/sandboxes/{ref}/previews", h.idempotentWith(h.createPreview, idempotency{refuse: refusePrivatePreview}))
	auth("GET /v1/sandboxes/{ref}/previews", h.listPreviews)
	auth("DELETE /v1/sandboxes/{ref}/previews/{id}", h.idempotent(h.deletePreview))
	auth("GET /v1/templates", h.listTemplates)
}

func (h *Handler) servePreviewPath(w http.ResponseWriter, r *http.Request) {
	if h.previews == nil {
		w.Header().Add("Content-Security-Policy", "sandbox")
		h.sh.writeError(w, r, api.Errorf(api.CodeNotFound, "this server serves no previews"))
		return
	}
	h.previews.ServePath(w, r)
}

// ServePreviews routes requests whose Host is <port>-<sandbox id>.<domain>
// (host[:port]) to previews; scheme is their URLs'. Call it before
// serving.
func (h *Handler) ServePreviews(domain, scheme string) {
	if h.PreviewService != nil {
		h.previews = preview.New(h.PreviewService, domain, scheme, h.sh.writeError)
	}
}

// PreviewHandler serves previews by Host alone, for a listener of their
// own (--preview-listen).
func (h *Handler) PreviewHandler() http.Handler {
	if h.previews == nil {
		return http.NotFoundHandler()
	}
	return h.previews
}

func (h previewRoutes) previewPlane() (PreviewService, error) {
	if h.PreviewService == nil {
		return nil, api.Errorf(api.CodeNotFound, "this server serves no previews")
	}
	return h.PreviewService, nil
}

func (h previewRoutes) createPreview(w http.ResponseWriter, r *http.Request, p lifecycle.Principal) error {
	pp, err := h.previewPlane()
	if err != nil {
		return err
	}
	var req api.CreatePreviewRequest
	if err := decode(r, &req, false); err != nil {
		return err
	}
	v, err := pp.CreatePreview(r.Context(), p.Team.ID, r.PathValue("ref"), req)
	if err != nil {
		return err
	}
	w.Header().Set("Cache-Control", "no-store")
	return writeJSON(w, http.StatusCreated, v)
}

func (h previewRoutes) listPreviews(w http.ResponseWriter, r *http.Request, p lifecycle.Principal) error {
	pp, err := h.previewPlane()
	if err != nil {
		return err
	}
	l, err := pp.ListPreviews(r.Context(), p.Team.ID, r.PathValue("ref"))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, l)
}

func (h previewRoutes) deletePreview(w http.ResponseWriter, r *http.Request, p lifecycle.Principal) error {
	pp, err := h.previewPlane()
	if err != nil {
		return err
	}
	if err := pp.DeletePreview(r.Context(), p.Team.ID, r.PathValue("ref"), r.PathValue("id")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// TemplateService is what the templates' routes ask of the templates'
// catalog (internal/control/templatecatalog).
type TemplateService interface {
	ListTemplates(ctx context.Context, teamID string) (api.List[api.Template], error)
	TemplateHealth() map[string]string
}

func (h previewRoutes) listTemplates(w http.ResponseWriter, r *http.Request, p lifecycle.Principal) error {
	if h.TemplateService == nil {
		return api.Errorf(api.CodeNotFound, "this server lists no templates")
	}
	l, err := h.TemplateService.ListTemplates(r.Context(), p.Team.ID)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, l)
}
