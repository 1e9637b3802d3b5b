package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/lifecycle"
	"github.com/cove-dev/cove/internal/control/page"
	"github.com/cove-dev/cove/internal/webhooks"
)

// Webhooks is what the webhook routes ask of the webhooks' service. A
// handler given none answers not_found.
type Webhooks interface {
	Create(ctx context.Context, teamID string, req api.CreateWebhookRequest) (api.CreateWebhookResponse, error)
	Created(ctx context.Context, teamID, webhookID string) (api.CreateWebhookResponse, error)
	Get(ctx context.Context, teamID, webhookID string) (api.Webhook, error)
	List(ctx context.Context, teamID string, p page.Page) (api.List[api.Webhook], error)
	Delete(ctx context.Context, teamID, webhookID string) error
	Deliveries(ctx context.Context, teamID, webhookID string, p page.Page) (api.List[api.Delivery], error)
}

var _ Webhooks = (*webhooks.Service)(nil)

// webhookRoutes serve the teams' webhooks and their deliveries.
type webhookRoutes struct {
	*shared
	Webhooks Webhooks
}

func (h webhookRoutes) routes(auth authFunc) {
	auth("POST /v1/webhooks", h.idempotentSecret(h.createWebhook, h.secretAnswer()))
	auth("GET /v1/webhooks", h.listWebhooks)
	auth("GET /v1/webhooks/{id}", h.getWebhook)
	auth("DELETE /v1/webhooks/{id}", h.idempotent(h.deleteWebhook))
	auth("GET /v1/webhooks/{id}/deliveries", h.listDeliveries)
}

func (h webhookRoutes) webhooks() (Webhooks, error) {
	if h.Webhooks == nil {
		return nil, api.Errorf(api.CodeNotFound, "this server does not serve webhooks")
	}
	return h.Webhooks, nil
}

func (h webhookRoutes) createWebhook(w http.ResponseWriter, r *http.Request, p lifecycle.Principal) error {
	wh, err := h.webhooks()
	if err != nil {
		return err
	}
	var req api.CreateWebhookRequest
	if err := decode(r, &req, false); err != nil {
		return err
	}
	resp, err := wh.Create(r.Context(), p.Team.ID, req)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusCreated, resp)
}

// secretAnswer keeps a webhook's secret out of the answer kept for an
// Idempotency-Key: the kept answer names the webhook only, and a replay
// reads the secret again from the store (so a deleted webhook replays as
// not_found).
func (h webhookRoutes) secretAnswer() secretAnswer {
	return secretAnswer{
		strip: func(body []byte) ([]byte, error) {
			var resp api.CreateWebhookResponse
			if err := json.Unmarshal(body, &resp); err != nil {
				return nil, err
			}
			resp.Secret = ""
			return json.Marshal(resp)
		},
		restore: func(ctx context.Context, p lifecycle.Principal, body []byte) ([]byte, error) {
			wh, err := h.webhooks()
			if err != nil {
				return nil, err
			}
			var kept api.CreateWebhookResponse
			if err := json.Unmarshal(body, &kept); err != nil {
				return nil, fmt.Errorf("read a kept webhook answer: %w", err)
			}
			resp, err := wh.Created(ctx, p.Team.ID, kept.Webhook.ID)
			if err != nil {
				return nil, err
			}
			return json.Marshal(resp)
		},
	}
}

func (h webhookRoutes) listWebhooks(w http.ResponseWriter, r *http.Request, p lifecycle.Principal) error {
	wh, err := h.webhooks()
	if err != nil {
		return err
	}
	pg, err := paging(r)
	if err != nil {
		return err
	}
	l, err := wh.List(r.Context(), p.Team.ID, page.Page(pg))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, l)
}

func (h webhookRoutes) getWebhook(w http.ResponseWriter, r *http.Request, p lifecycle.Principal) error {
	wh, err := h.webhooks()
	if err != nil {
		return err
	}
	hook, err := wh.Get(r.Context(), p.Team.ID, r.PathValue("id"))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, hook)
}

func (h webhookRoutes) deleteWebhook(w http.ResponseWriter, r *http.Request, p lifecycle.Principal) error {
	wh, err := h.webhooks()
	if err != nil {
		return err
	}
	if err := wh.Delete(r.Context(), p.Team.ID, r.PathValue("id")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (h webhookRoutes) listDeliveries(w http.ResponseWriter, r *http.Request, p lifecycle.Principal) error {
	wh, err := h.webhooks()
	if err != nil {
		return err
	}
	pg, err := paging(r)
	if err != nil {
		return err
	}
	l, err := wh.Deliveries(r.Context(), p.Team.ID, r.PathValue("id"), page.Page(pg))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, l)
}
