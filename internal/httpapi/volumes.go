package httpapi

import (
	"context"
	"net/http"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/lifecycle"
)

// Volumes are the volume calls (issue #32): internal/control/lifecycle.
type Volumes interface {
	CreateVolume(ctx context.Context, teamID string, req api.CreateVolumeRequest) (api.Volume, error)
	GetVolume(ctx context.Context, teamID, ref string) (api.Volume, error)
	ListVolumes(ctx context.Context, teamID string, q lifecycle.VolumeQuery) (api.List[api.Volume], error)
	DeleteVolume(ctx context.Context, teamID, ref string) error
}

var _ Volumes = (*lifecycle.Core)(nil)

// volumeRoutes serve a team's volumes.
type volumeRoutes struct {
	*shared
	Volumes Volumes
}

func (h volumeRoutes) routes(auth authFunc) {
	auth("POST /v1/volumes", h.idempotent(h.createVolume))
	auth("GET /v1/volumes", h.listVolumes)
	auth("GET /v1/volumes/{ref}", h.getVolume)
	auth("DELETE /v1/volumes/{ref}", h.idempotent(h.deleteVolume))
}

// volumeNode shows where a volume is to the admin team only, as a
// sandbox's node is (withNode).
func volumeNode(p lifecycle.Principal, v *api.Volume) {
	if !p.Admin() {
		v.Node = ""
	}
}

func (h volumeRoutes) createVolume(w http.ResponseWriter, r *http.Request, p lifecycle.Principal) error {
	var req api.CreateVolumeRequest
	if err := decode(r, &req, true); err != nil {
		return err
	}
	v, err := h.Volumes.CreateVolume(r.Context(), p.Team.ID, req)
	if err != nil {
		return err
	}
	volumeNode(p, &v)
	w.Header().Set("Location", "/v1/volumes/"+v.ID)
	return writeJSON(w, http.StatusCreated, v)
}

func (h volumeRoutes) listVolumes(w http.ResponseWriter, r *http.Request, p lifecycle.Principal) error {
	pg, err := paging(r)
	if err != nil {
		return err
	}
	l, err := h.Volumes.ListVolumes(r.Context(), p.Team.ID, lifecycle.VolumeQuery{After: pg.Cursor, Limit: pg.Limit})
	if err != nil {
		return err
	}
	for i := range l.Items {
		volumeNode(p, &l.Items[i])
	}
	return writeJSON(w, http.StatusOK, l)
}

func (h volumeRoutes) getVolume(w http.ResponseWriter, r *http.Request, p lifecycle.Principal) error {
	v, err := h.Volumes.GetVolume(r.Context(), p.Team.ID, r.PathValue("ref"))
	if err != nil {
		return err
	}
	volumeNode(p, &v)
	return writeJSON(w, http.StatusOK, v)
}

func (h volumeRoutes) deleteVolume(w http.ResponseWriter, r *http.Request, p lifecycle.Principal) error {
	if err := h.Volumes.DeleteVolume(r.Context(), p.Team.ID, r.PathValue("ref")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
