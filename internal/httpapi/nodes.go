package httpapi

import (
	"context"
	"net/http"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/lifecycle"
)

// Nodes is what the admin API asks of a fleet's registry
// (internal/control/fleet): its nodes, drain and removal, and the node a
// sandbox is placed on. A `cove serve` has none.
type Nodes interface {
	Nodes(ctx context.Context) ([]api.Node, error)
	Drain(ctx context.Context, ref string) (api.Node, error)
	Undrain(ctx context.Context, ref string) (api.Node, error)
	Remove(ctx context.Context, ref string) error
	SandboxNode(sandboxID string) (api.SandboxNode, bool)
}

// JoinTokens rotates the fleet's join token (the join service,
// internal/control/fleet/join).
type JoinTokens interface {
	RotateJoinToken(ctx context.Context) (api.JoinToken, error)
}

// nodeRoutes serve the fleet's nodes to the admin team.
type nodeRoutes struct {
	*shared
	Nodes      Nodes
	JoinTokens JoinTokens
}

func (h nodeRoutes) routes(auth authFunc) {
	auth("GET /v1/nodes", h.listNodes)
	auth("POST /v1/nodes/{ref}/drain", h.idempotent(h.drainNode))
	auth("POST /v1/nodes/{ref}/undrain", h.idempotent(h.undrainNode))
	auth("DELETE /v1/nodes/{ref}", h.idempotent(h.removeNode))
	auth("POST /v1/nodes/join-token", refuseIdempotencyKey("a join token", h.rotateJoinToken))
}

// fleet answers permission_denied to every team but the admin team, and
// not_found on a server without a fleet.
func (h nodeRoutes) fleet(p lifecycle.Principal) (Nodes, error) {
	if !p.Admin() {
		return nil, api.Errorf(api.CodePermissionDenied, "nodes are for operators: use the admin key")
	}
	if h.Nodes == nil {
		return nil, api.Errorf(api.CodeNotFound, "this server runs no fleet (start it with `cove control`)")
	}
	return h.Nodes, nil
}

func (h nodeRoutes) listNodes(w http.ResponseWriter, r *http.Request, p lifecycle.Principal) error {
	f, err := h.fleet(p)
	if err != nil {
		return err
	}
	ns, err := f.Nodes(r.Context())
	if err != nil {
		return err
	}
	if ns == nil {
		ns = []api.Node{}
	}
	return writeJSON(w, http.StatusOK, api.List[api.Node]{Items: ns})
}

func (h nodeRoutes) drainNode(w http.ResponseWriter, r *http.Request, p lifecycle.Principal) error {
	f, err := h.fleet(p)
	if err != nil {
		return err
	}
	n, err := f.Drain(r.Context(), r.PathValue("ref"))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, n)
}

func (h nodeRoutes) undrainNode(w http.ResponseWriter, r *http.Request, p lifecycle.Principal) error {
	f, err := h.fleet(p)
	if err != nil {
		return err
	}
	n, err := f.Undrain(r.Context(), r.PathValue("ref"))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, n)
}

func (h nodeRoutes) removeNode(w http.ResponseWriter, r *http.Request, p lifecycle.Principal) error {
	f, err := h.fleet(p)
	if err != nil {
		return err
	}
	if err := f.Remove(r.Context(), r.PathValue("ref")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (h nodeRoutes) rotateJoinToken(w http.ResponseWriter, r *http.Request, p lifecycle.Principal) error {
	if _, err := h.fleet(p); err != nil {
		return err
	}
	if h.JoinTokens == nil {
		return api.Errorf(api.CodeNotFound, "this server has no join service")
	}
	tok, err := h.JoinTokens.RotateJoinToken(r.Context())
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, tok)
}

// withNode names the node of each sandbox for the admin team; other teams
// never see where their sandboxes run.
func withNode(nodes Nodes, p lifecycle.Principal, sbs ...*api.Sandbox) {
	if nodes == nil || !p.Admin() {
		return
	}
	for _, sb := range sbs {
		if n, ok := nodes.SandboxNode(sb.ID); ok {
			sb.Node = &n
		}
	}
}
