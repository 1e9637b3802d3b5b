package httpapi

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"reflect"
	"strings"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/lifecycle"
)

// ImageService is what the images' routes ask of the image catalog
// (internal/control/imagecatalog). Each call acts for team t, the
// caller's.
type ImageService interface {
	ImportImage(ctx context.Context, t api.Team, name string, settings api.ImageSettings, body io.Reader) (api.Image, error)
	ListImages(ctx context.Context, t api.Team) (api.List[api.Image], error)
	GetImage(ctx context.Context, t api.Team, ref string) (api.Image, error)
	UpdateImage(ctx context.Context, t api.Team, ref string, st api.ImageSettings) (api.Image, error)
	DeleteImage(ctx context.Context, t api.Team, ref string) error
}

// imageRoutes serve the image catalog.
type imageRoutes struct {
	*shared
	ImageService ImageService
}

func (h imageRoutes) routes(auth authFunc) {
	auth("POST /v1/images", h.idempotentUpload(h.importImage))
	auth("GET /v1/images", h.listImages)
	auth("GET /v1/images/{id}", h.getImage)
	auth("PATCH /v1/images/{id}", h.idempotent(h.updateImage))
	auth("DELETE /v1/images/{id}", h.idempotent(h.deleteImage))
}

func (h imageRoutes) imagePlane() (ImageService, error) {
	if h.ImageService == nil {
		return nil, api.Errorf(api.CodeNotFound, "this server does not import images")
	}
	return h.ImageService, nil
}

// importImage streams the request body (an OCI image layout or a
// docker-save archive, as a tar) into the importer. ?name= names the
// image; ?settings= may carry its settings as JSON (api.ImageSettings).
func (h imageRoutes) importImage(w http.ResponseWriter, r *http.Request, p lifecycle.Principal) error {
	ip, err := h.imagePlane()
	if err != nil {
		return err
	}
	q := r.URL.Query()
	var st api.ImageSettings
	if raw := q.Get("settings"); raw != "" {
		dec := json.NewDecoder(strings.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&st); err != nil {
			return jsonError("query parameter settings", reflect.TypeOf(st), err)
		}
	}
	img, err := ip.ImportImage(r.Context(), p.Team, q.Get("name"), st, h.uploadBody(w, r))
	if err != nil {
		return err
	}
	w.Header().Set("Location", "/v1/images/"+img.ID)
	return writeJSON(w, http.StatusCreated, img)
}

func (h imageRoutes) listImages(w http.ResponseWriter, r *http.Request, p lifecycle.Principal) error {
	ip, err := h.imagePlane()
	if err != nil {
		return err
	}
	l, err := ip.ListImages(r.Context(), p.Team)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, l)
}

func (h imageRoutes) getImage(w http.ResponseWriter, r *http.Request, p lifecycle.Principal) error {
	ip, err := h.imagePlane()
	if err != nil {
		return err
	}
	img, err := ip.GetImage(r.Context(), p.Team, r.PathValue("id"))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, img)
}

func (h imageRoutes) updateImage(w http.ResponseWriter, r *http.Request, p lifecycle.Principal) error {
	ip, err := h.imagePlane()
	if err != nil {
		return err
	}
	var st api.ImageSettings
	if err := decode(r, &st, false); err != nil {
		return err
	}
	img, err := ip.UpdateImage(r.Context(), p.Team, r.PathValue("id"), st)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, img)
}

func (h imageRoutes) deleteImage(w http.ResponseWriter, r *http.Request, p lifecycle.Principal) error {
	ip, err := h.imagePlane()
	if err != nil {
		return err
	}
	if err := ip.DeleteImage(r.Context(), p.Team, r.PathValue("id")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
