package httpapi

import (
	"context"
	"net/http"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/lifecycle"
	"github.com/cove-dev/cove/internal/control/page"
	"github.com/cove-dev/cove/internal/control/vault"
)

// Secrets is what the API asks of the vault about a team's
// secrets. No call returns a value.
type Secrets interface {
	Put(ctx context.Context, teamID, name, value string) (api.Secret, bool, error)
	Get(ctx context.Context, teamID, name string) (api.Secret, error)
	List(ctx context.Context, teamID string, p page.Page) (api.List[api.Secret], error)
	Delete(ctx context.Context, teamID, name string) error
}

var _ Secrets = (*vault.Service)(nil)

// secretRoutes serve the teams' secrets.
type secretRoutes struct {
	*shared
	Secrets Secrets
}

func (h secretRoutes) routes(auth authFunc) {
	auth("GET /v1/secrets", h.listSecrets)
	auth("PUT /v1/secrets/{name}", h.putSecret)
	auth("GET /v1/secrets/{name}", h.getSecret)
	auth("DELETE /v1/secrets/{name}", h.idempotent(h.deleteSecret))
}

// putSecret stores a value: 201 with the secret's description when it
// is new, 200 when it replaced one.
func (h secretRoutes) putSecret(w http.ResponseWriter, r *http.Request, p lifecycle.Principal) error {
	var req api.PutSecretRequest
	if err := decode(r, &req, false); err != nil {
		return err
	}
	sec, created, err := h.Secrets.Put(r.Context(), p.Team.ID, r.PathValue("name"), req.Value)
	if err != nil {
		return err
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
		w.Header().Set("Location", "/v1/secrets/"+sec.Name)
	}
	return writeJSON(w, status, sec)
}

func (h secretRoutes) getSecret(w http.ResponseWriter, r *http.Request, p lifecycle.Principal) error {
	sec, err := h.Secrets.Get(r.Context(), p.Team.ID, r.PathValue("name"))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, sec)
}

func (h secretRoutes) listSecrets(w http.ResponseWriter, r *http.Request, p lifecycle.Principal) error {
	pg, err := paging(r)
	if err != nil {
		return err
	}
	l, err := h.Secrets.List(r.Context(), p.Team.ID, page.Page(pg))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, l)
}

func (h secretRoutes) deleteSecret(w http.ResponseWriter, r *http.Request, p lifecycle.Principal) error {
	if err := h.Secrets.Delete(r.Context(), p.Team.ID, r.PathValue("name")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
