package httpapi

import (
	"context"
	"net/http"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/lifecycle"
)

// Snapshots are the snapshot, restore and fork calls (issue #32):
// internal/control/lifecycle.
type Snapshots interface {
	CreateSnapshot(ctx context.Context, teamID, ref string, req api.CreateSnapshotRequest) (api.Snapshot, error)
	GetSnapshot(ctx context.Context, teamID, ref string) (api.Snapshot, error)
	ListSnapshots(ctx context.Context, teamID string, q lifecycle.SnapshotQuery) (api.List[api.Snapshot], error)
	DeleteSnapshot(ctx context.Context, teamID, ref string) error
	RestoreSandbox(ctx context.Context, teamID, ref string, req api.RestoreSandboxRequest) (api.Sandbox, error)
	ForkSandbox(ctx context.Context, teamID, ref string, req api.ForkSandboxRequest) ([]api.Sandbox, error)
}

var _ Snapshots = (*lifecycle.Core)(nil)

// snapshotRoutes serve snapshots, restores and forks.
type snapshotRoutes struct {
	*shared
	Snapshots Snapshots
	Sandboxes Sandboxes
}

func (h snapshotRoutes) routes(auth authFunc) {
	auth("POST /v1/sandboxes/{ref}/snapshots", h.idempotent(h.createSnapshot))
	auth("GET /v1/snapshots", h.listSnapshots)
	auth("GET /v1/snapshots/{ref}", h.getSnapshot)
	auth("DELETE /v1/snapshots/{ref}", h.idempotent(h.deleteSnapshot))
	auth("POST /v1/sandboxes/{ref}/restore", h.idempotent(h.restoreSandbox))
	auth("POST /v1/sandboxes/{ref}/fork", h.admits(h.idempotent(h.forkSandbox)))
}

func (h snapshotRoutes) createSnapshot(w http.ResponseWriter, r *http.Request, p lifecycle.Principal) error {
	var req api.CreateSnapshotRequest
	if err := decode(r, &req, true); err != nil {
		return err
	}
	s, err := h.Snapshots.CreateSnapshot(r.Context(), p.Team.ID, r.PathValue("ref"), req)
	if err != nil {
		return err
	}
	w.Header().Set("Location", "/v1/snapshots/"+s.ID)
	return writeJSON(w, http.StatusCreated, s)
}

func (h snapshotRoutes) listSnapshots(w http.ResponseWriter, r *http.Request, p lifecycle.Principal) error {
	pg, err := paging(r)
	if err != nil {
		return err
	}
	l, err := h.Snapshots.ListSnapshots(r.Context(), p.Team.ID, lifecycle.SnapshotQuery{
		SandboxID: r.URL.Query().Get("sandbox"), After: pg.Cursor, Limit: pg.Limit,
	})
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, l)
}

func (h snapshotRoutes) getSnapshot(w http.ResponseWriter, r *http.Request, p lifecycle.Principal) error {
	s, err := h.Snapshots.GetSnapshot(r.Context(), p.Team.ID, r.PathValue("ref"))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, s)
}

func (h snapshotRoutes) deleteSnapshot(w http.ResponseWriter, r *http.Request, p lifecycle.Principal) error {
	if err := h.Snapshots.DeleteSnapshot(r.Context(), p.Team.ID, r.PathValue("ref")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// waitRunning reads ?wait=running and ?timeout_s=.
func waitRunning(r *http.Request) (bool, time.Duration, error) {
	wait := r.URL.Query().Get("wait")
	if wait != "" && wait != string(api.StateRunning) {
		return false, 0, api.Errorf(api.CodeInvalidArgument, "wait must be %q", api.StateRunning)
	}
	timeout, err := queryInt(r, "timeout_s", 0, 0, 3600)
	return wait != "", time.Duration(timeout) * time.Second, err
}

func (h snapshotRoutes) restoreSandbox(w http.ResponseWriter, r *http.Request, p lifecycle.Principal) error {
	var req api.RestoreSandboxRequest
	if err := decode(r, &req, true); err != nil {
		return err
	}
	wait, timeout, err := waitRunning(r)
	if err != nil {
		return err
	}
	sb, err := h.Snapshots.RestoreSandbox(r.Context(), p.Team.ID, r.PathValue("ref"), req)
	if err != nil {
		return err
	}
	if wait {
		if sb, err = h.Sandboxes.WaitSandbox(r.Context(), p.Team.ID, sb.ID, api.StateRunning, timeout); err != nil {
			return err
		}
	}
	return writeJSON(w, http.StatusOK, sb)
}

func (h snapshotRoutes) forkSandbox(w http.ResponseWriter, r *http.Request, p lifecycle.Principal) error {
	var req api.ForkSandboxRequest
	if err := decode(r, &req, true); err != nil {
		return err
	}
	wait, timeout, err := waitRunning(r)
	if err != nil {
		return err
	}
	items, err := h.Snapshots.ForkSandbox(r.Context(), p.Team.ID, r.PathValue("ref"), req)
	if err != nil {
		return err
	}
	if wait {
		for i := range items {
			if items[i], err = h.Sandboxes.WaitSandbox(r.Context(), p.Team.ID, items[i].ID, api.StateRunning, timeout); err != nil {
				return err
			}
		}
	}
	return writeJSON(w, http.StatusCreated, api.ForkResult{Items: items})
}
