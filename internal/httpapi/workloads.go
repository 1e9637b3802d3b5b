package httpapi

import (
	"github.com/cove-dev/cove/internal/control/workloads"
	"net/http"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/lifecycle"
)

// GPUPlane is the control plane's optional report of the node's GPUs,
// for GET /healthz.
type GPUPlane interface {
	GPUHealth() api.GPUHealth
}

// workloadRoutes serve the batch runs.
type workloadRoutes struct {
	*shared
	Workloads Workloads
}

func (h workloadRoutes) routes(auth authFunc) {
	auth("POST /v1/workloads", h.idempotent(h.submitWorkload))
	auth("GET /v1/workloads", h.listWorkloads)
	auth("GET /v1/workloads/{id}", h.getWorkload)
	auth("POST /v1/workloads/{id}/cancel", h.idempotent(h.cancelWorkload))
	auth("GET /v1/workloads/{id}/output", h.workloadOutput)
	auth("GET /v1/workloads/{id}/stdout", h.workloadStream("stdout"))
	auth("GET /v1/workloads/{id}/stderr", h.workloadStream("stderr"))
}

func (h workloadRoutes) submitWorkload(w http.ResponseWriter, r *http.Request, p lifecycle.Principal) error {
	var req api.CreateWorkloadRequest
	if err := decode(r, &req, false); err != nil {
		return err
	}
	wl, err := h.Workloads.SubmitWorkload(r.Context(), p.Team.ID, req)
	if err != nil {
		return err
	}
	w.Header().Set("Location", "/v1/workloads/"+wl.ID)
	return writeJSON(w, http.StatusCreated, wl)
}

func (h workloadRoutes) getWorkload(w http.ResponseWriter, r *http.Request, p lifecycle.Principal) error {
	wid := r.PathValue("id")
	if wait := r.URL.Query().Get("wait"); wait != "" {
		state := api.WorkloadState(wait)
		if !state.Valid() {
			return api.Errorf(api.CodeInvalidArgument, "wait is %q, which is not a workload state", wait)
		}
		timeout, err := queryInt(r, "timeout_s", 0, 0, 3600)
		if err != nil {
			return err
		}
		wl, err := h.Workloads.WaitWorkload(r.Context(), p.Team.ID, wid, state, time.Duration(timeout)*time.Second)
		if err != nil {
			return err
		}
		return writeJSON(w, http.StatusOK, wl)
	}
	wl, err := h.Workloads.GetWorkload(r.Context(), p.Team.ID, wid)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, wl)
}

func (h workloadRoutes) listWorkloads(w http.ResponseWriter, r *http.Request, p lifecycle.Principal) error {
	pg, err := paging(r)
	if err != nil {
		return err
	}
	q := workloads.Query{Page: pg}
	for _, s := range csv(r, "state") {
		q.States = append(q.States, api.WorkloadState(s))
	}
	l, err := h.Workloads.ListWorkloads(r.Context(), p.Team.ID, q)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, l)
}

func (h workloadRoutes) cancelWorkload(w http.ResponseWriter, r *http.Request, p lifecycle.Principal) error {
	wl, err := h.Workloads.CancelWorkload(r.Context(), p.Team.ID, r.PathValue("id"))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusAccepted, wl)
}

// workloadOutput serves a workload's output as a command's: NDJSON from
// after=SEQ, with follow until it ends.
func (h workloadRoutes) workloadOutput(w http.ResponseWriter, r *http.Request, p lifecycle.Principal) error {
	after, follow, err := outputQuery(r)
	if err != nil {
		return err
	}
	wl, l, err := h.Workloads.WorkloadOutput(r.Context(), p.Team.ID, r.PathValue("id"))
	if err != nil {
		return err
	}
	defer l.Close()
	h.streamOutput(w, r, wl.ID, l, after, follow)
	return nil
}

func (h workloadRoutes) workloadStream(name string) func(http.ResponseWriter, *http.Request, lifecycle.Principal) error {
	return func(w http.ResponseWriter, r *http.Request, p lifecycle.Principal) error {
		_, l, err := h.Workloads.WorkloadOutput(r.Context(), p.Team.ID, r.PathValue("id"))
		if err != nil {
			return err
		}
		defer l.Close()
		return serveStream(w, r, l, name)
	}
}
