package httpapi

import (
	"context"
	"net/http"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/lifecycle"
	"github.com/cove-dev/cove/internal/control/teams"
)

// teamRoutes serve the teams and their keys (Teams is shared, for it
// authenticates every request).
type teamRoutes struct {
	*shared
}

func (h teamRoutes) routes(auth authFunc) {
	auth("POST /v1/teams", refuseIdempotencyKey("an API key", h.createTeam))
	auth("GET /v1/teams", h.listTeams)
	auth("GET /v1/teams/me", h.teamMe)
	auth("PATCH /v1/teams/{id}", h.idempotent(h.updateTeam))
	auth("POST /v1/teams/{id}/keys", refuseIdempotencyKey("an API key", h.createKey))
	auth("DELETE /v1/keys/{id}", h.idempotent(h.revokeKey))
}

// Teams is what the API asks of the teams' service: who a key acts as,
// and the teams and keys an admin (or a team, for its own keys) manages.
type Teams interface {
	Authenticate(ctx context.Context, key string) (teams.Principal, error)
	CreateTeam(ctx context.Context, p teams.Principal, req api.CreateTeamRequest) (api.CreateTeamResponse, error)
	ListTeams(ctx context.Context, p teams.Principal) ([]api.Team, error)
	CreateKey(ctx context.Context, p teams.Principal, teamID string, req api.CreateKeyRequest) (api.KeyResponse, error)
	RevokeKey(ctx context.Context, p teams.Principal, keyID string) error
	// TeamMe is the key's team with its effective admission.
	TeamMe(ctx context.Context, p teams.Principal) (api.TeamMe, error)
	// UpdateTeam changes a team's admission, spend limit and budget
	// alerts (admin only).
	UpdateTeam(ctx context.Context, p teams.Principal, teamID string, req api.UpdateTeamRequest) (api.Team, error)
}

// Idempotency keeps the answers of create requests per team and
// Idempotency-Key (idempotency.go).
type Idempotency interface {
	Idempotently(ctx context.Context, teamID, key, requestHash string, do func(ctx context.Context) teams.Answer) (teams.Answer, bool, error)
}

var (
	_ Teams       = (*teams.Service)(nil)
	_ Idempotency = (*teams.Service)(nil)
)

func (h teamRoutes) createTeam(w http.ResponseWriter, r *http.Request, p lifecycle.Principal) error {
	var req api.CreateTeamRequest
	if err := decode(r, &req, false); err != nil {
		return err
	}
	resp, err := h.Teams.CreateTeam(r.Context(), p, req)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusCreated, resp)
}

func (h teamRoutes) listTeams(w http.ResponseWriter, r *http.Request, p lifecycle.Principal) error {
	teams, err := h.Teams.ListTeams(r.Context(), p)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, api.List[api.Team]{Items: teams})
}

func (h teamRoutes) createKey(w http.ResponseWriter, r *http.Request, p lifecycle.Principal) error {
	var req api.CreateKeyRequest
	if err := decode(r, &req, true); err != nil {
		return err
	}
	resp, err := h.Teams.CreateKey(r.Context(), p, r.PathValue("id"), req)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusCreated, resp)
}

func (h teamRoutes) revokeKey(w http.ResponseWriter, r *http.Request, p lifecycle.Principal) error {
	if err := h.Teams.RevokeKey(r.Context(), p, r.PathValue("id")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (h teamRoutes) teamMe(w http.ResponseWriter, r *http.Request, p lifecycle.Principal) error {
	me, err := h.Teams.TeamMe(r.Context(), p)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, me)
}
