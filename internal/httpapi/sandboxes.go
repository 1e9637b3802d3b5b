package httpapi

import (
	"net/http"
	"strings"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/lifecycle"
)

// sandboxRoutes serve the sandboxes' life cycle and their network reads.
type sandboxRoutes struct {
	*shared
	Sandboxes    Sandboxes
	Observations Observations
	// Nodes names a sandbox's node for the admin team; nil without a fleet.
	Nodes Nodes
}

func (h sandboxRoutes) routes(auth authFunc) {
	auth("POST /v1/sandboxes", h.admits(h.idempotent(h.createSandbox)))
	auth("GET /v1/sandboxes", h.listSandboxes)
	auth("GET /v1/sandboxes/{ref}", h.getSandbox)
	auth("DELETE /v1/sandboxes/{ref}", h.idempotent(h.terminateSandbox))
	auth("PATCH /v1/sandboxes/{ref}", h.idempotent(h.updateSandbox))
	auth("GET /v1/sandboxes/{ref}/network", h.sandboxNetwork)
	auth("POST /v1/sandboxes/{ref}/sleep", h.idempotent(h.sleepSandbox))
	auth("POST /v1/sandboxes/{ref}/wake", h.idempotent(h.wakeSandbox))
}

func (h sandboxRoutes) createSandbox(w http.ResponseWriter, r *http.Request, p lifecycle.Principal) error {
	var req api.CreateSandboxRequest
	if err := decode(r, &req, true); err != nil {
		return err
	}
	wait := r.URL.Query().Get("wait")
	if wait != "" && wait != string(api.StateRunning) {
		return api.Errorf(api.CodeInvalidArgument, "wait must be %q", api.StateRunning)
	}
	timeout, err := queryInt(r, "timeout_s", 0, 0, 3600)
	if err != nil {
		return err
	}
	sb, err := h.Sandboxes.CreateSandbox(r.Context(), p.Team.ID, req)
	if err != nil {
		return err
	}
	// A create that took a warm-pool sandbox answers it running: there
	// is nothing to wait for, or to read again.
	if wait != "" && sb.State != api.StateRunning && !sb.State.Terminal() {
		if sb, err = h.Sandboxes.WaitSandbox(r.Context(), p.Team.ID, sb.ID, api.StateRunning, time.Duration(timeout)*time.Second); err != nil {
			return err
		}
	}
	w.Header().Set("Location", "/v1/sandboxes/"+sb.ID)
	withNode(h.Nodes, p, &sb)
	return writeJSON(w, http.StatusCreated, sb)
}

func (h sandboxRoutes) getSandbox(w http.ResponseWriter, r *http.Request, p lifecycle.Principal) error {
	ref := r.PathValue("ref")
	if wait := r.URL.Query().Get("wait"); wait != "" {
		state := api.SandboxState(wait)
		if !state.Valid() {
			return api.Errorf(api.CodeInvalidArgument, "wait is %q, which is not a sandbox state", wait)
		}
		timeout, err := queryInt(r, "timeout_s", 0, 0, 3600)
		if err != nil {
			return err
		}
		sb, err := h.Sandboxes.WaitSandbox(r.Context(), p.Team.ID, ref, state, time.Duration(timeout)*time.Second)
		if err != nil {
			return err
		}
		withNode(h.Nodes, p, &sb)
		return writeJSON(w, http.StatusOK, sb)
	}
	sb, err := h.Sandboxes.GetSandbox(r.Context(), p.Team.ID, ref)
	if err != nil {
		return err
	}
	withNode(h.Nodes, p, &sb)
	return writeJSON(w, http.StatusOK, sb)
}

func (h sandboxRoutes) listSandboxes(w http.ResponseWriter, r *http.Request, p lifecycle.Principal) error {
	pg, err := paging(r)
	if err != nil {
		return err
	}
	q := lifecycle.SandboxQuery{Page: pg}
	for _, s := range csv(r, "state") {
		q.States = append(q.States, api.SandboxState(s))
	}
	for _, v := range r.URL.Query()["label"] {
		k, val, ok := strings.Cut(v, "=")
		if !ok || k == "" {
			return api.Errorf(api.CodeInvalidArgument, "label filter %q must look like key=value", v)
		}
		if q.Labels == nil {
			q.Labels = map[string]string{}
		}
		q.Labels[k] = val
	}
	l, err := h.Sandboxes.ListSandboxes(r.Context(), p.Team.ID, q)
	if err != nil {
		return err
	}
	for i := range l.Items {
		withNode(h.Nodes, p, &l.Items[i])
	}
	return writeJSON(w, http.StatusOK, l)
}

func (h sandboxRoutes) terminateSandbox(w http.ResponseWriter, r *http.Request, p lifecycle.Principal) error {
	sb, err := h.Sandboxes.TerminateSandbox(r.Context(), p.Team.ID, r.PathValue("ref"))
	if err != nil {
		return err
	}
	withNode(h.Nodes, p, &sb)
	return writeJSON(w, http.StatusAccepted, sb)
}

func (h sandboxRoutes) sleepSandbox(w http.ResponseWriter, r *http.Request, p lifecycle.Principal) error {
	sb, err := h.Sandboxes.SleepSandbox(r.Context(), p.Team.ID, r.PathValue("ref"), "put to sleep by request")
	if err != nil {
		return err
	}
	withNode(h.Nodes, p, &sb)
	return writeJSON(w, http.StatusAccepted, sb)
}

func (h sandboxRoutes) wakeSandbox(w http.ResponseWriter, r *http.Request, p lifecycle.Principal) error {
	sb, err := h.Sandboxes.WakeSandbox(r.Context(), p.Team.ID, r.PathValue("ref"))
	if err != nil {
		return err
	}
	withNode(h.Nodes, p, &sb)
	return writeJSON(w, http.StatusAccepted, sb)
}

func (h sandboxRoutes) updateSandbox(w http.ResponseWriter, r *http.Request, p lifecycle.Principal) error {
	var req api.UpdateSandboxRequest
	if err := decode(r, &req, false); err != nil {
		return err
	}
	sb, err := h.Sandboxes.UpdateSandbox(r.Context(), p.Team.ID, r.PathValue("ref"), req)
	if err != nil {
		return err
	}
	withNode(h.Nodes, p, &sb)
	return writeJSON(w, http.StatusOK, sb)
}

func (h sandboxRoutes) sandboxNetwork(w http.ResponseWriter, r *http.Request, p lifecycle.Principal) error {
	if h.Observations == nil {
		return api.Errorf(api.CodeNotFound, "this server does not observe the network")
	}
	v, err := h.Observations.Network(r.Context(), p.Team.ID, r.PathValue("ref"))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, v)
}
