package server

import (
	"context"
	"regexp"
	"slices"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/id"
	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/internal/webhooks"
)

// Bounds of webhooks.
const (
	MaxWebhooksPerTeam = 50
	maxWebhookEvents   = 64
)

// eventPatternRE is an event type, a family ("sandbox.*") or "*".
var eventPatternRE = regexp.MustCompile(`^(\*|[a-z][a-z_]*(\.[a-z][a-z_]*)*(\.\*)?)$`)

// CreateWebhook registers an endpoint for the team's events and returns
// its signing secret, which is shown only here.
func (s *Server) CreateWebhook(ctx context.Context, teamID string, req api.CreateWebhookRequest) (api.CreateWebhookResponse, error) {
	if err := scoped(teamID); err != nil {
		return api.CreateWebhookResponse{}, err
	}
	if err := webhooks.CheckURL(ctx, req.URL, s.cfg.WebhookAllowPrivate); err != nil {
		return api.CreateWebhookResponse{}, err
	}
	events := req.Events
	if len(events) == 0 {
		events = []string{"*"}
	}
	if len(events) > maxWebhookEvents {
		return api.CreateWebhookResponse{}, invalid("events: at most %d entries", maxWebhookEvents)
	}
	for _, e := range events {
		if len(e) > 128 || !eventPatternRE.MatchString(e) {
			return api.CreateWebhookResponse{}, invalid("events: %q is not an event type (sandbox.running), a family (sandbox.*) or *", e)
		}
	}
	events = slices.Compact(slices.Sorted(slices.Values(events)))
	n, err := s.store.ListWebhooks(ctx, store.WebhookFilter{TeamID: teamID, Limit: MaxWebhooksPerTeam})
	if err != nil {
		return api.CreateWebhookResponse{}, err
	}
	if len(n) >= MaxWebhooksPerTeam {
		return api.CreateWebhookResponse{}, api.Errorf(api.CodeResourceExhausted,
			"the team has %d webhooks, the most it may have; delete one first", MaxWebhooksPerTeam)
	}
	w := store.Webhook{
		Webhook: api.Webhook{ID: id.New("whk"), TeamID: teamID, URL: req.URL, Events: events, CreatedAt: s.now()},
		Secret:  webhooks.NewSecret(),
	}
	if err := s.store.CreateWebhook(ctx, w); err != nil {
		return api.CreateWebhookResponse{}, err
	}
	s.log.Info("webhook created", "webhook", w.ID, "team", teamID, "events", events)
	return api.CreateWebhookResponse{Webhook: w.Webhook, Secret: w.Secret}, nil
}

// CreatedWebhook answers again what CreateWebhook answered for one of the
// team's webhooks, its secret read again from the store: a replayed
// create (Idempotency-Key) keeps no secret of its own.
func (s *Server) CreatedWebhook(ctx context.Context, teamID, webhookID string) (api.CreateWebhookResponse, error) {
	if err := scoped(teamID); err != nil {
		return api.CreateWebhookResponse{}, err
	}
	w, err := s.store.GetWebhook(ctx, teamID, webhookID)
	if err != nil {
		return api.CreateWebhookResponse{}, err
	}
	return api.CreateWebhookResponse{Webhook: w.Webhook, Secret: w.Secret}, nil
}

// GetWebhook returns one of the team's webhooks (never its secret).
func (s *Server) GetWebhook(ctx context.Context, teamID, webhookID string) (api.Webhook, error) {
	if err := scoped(teamID); err != nil {
		return api.Webhook{}, err
	}
	w, err := s.store.GetWebhook(ctx, teamID, webhookID)
	return w.Webhook, err
}

// ListWebhooks returns a page of the team's webhooks.
func (s *Server) ListWebhooks(ctx context.Context, teamID string, p Page) (api.List[api.Webhook], error) {
	if err := scoped(teamID); err != nil {
		return api.List[api.Webhook]{}, err
	}
	limit, err := p.limit()
	if err != nil {
		return api.List[api.Webhook]{}, err
	}
	hooks, err := s.store.ListWebhooks(ctx, store.WebhookFilter{TeamID: teamID, After: p.Cursor, Limit: limit + 1})
	if err != nil {
		return api.List[api.Webhook]{}, err
	}
	items := make([]api.Webhook, len(hooks))
	for i, w := range hooks {
		items[i] = w.Webhook
	}
	return page(items, limit, func(w api.Webhook) string { return w.ID }), nil
}

// DeleteWebhook removes one of the team's webhooks; its pending
// deliveries are dropped.
func (s *Server) DeleteWebhook(ctx context.Context, teamID, webhookID string) error {
	if err := scoped(teamID); err != nil {
		return err
	}
	if err := s.store.DeleteWebhook(ctx, teamID, webhookID); err != nil {
		return err
	}
	s.log.Info("webhook deleted", "webhook", webhookID, "team", teamID)
	return nil
}

// ListDeliveries returns a page of a webhook's deliveries, newest first.
func (s *Server) ListDeliveries(ctx context.Context, teamID, webhookID string, p Page) (api.List[api.Delivery], error) {
	if _, err := s.GetWebhook(ctx, teamID, webhookID); err != nil {
		return api.List[api.Delivery]{}, err
	}
	limit, err := p.limit()
	if err != nil {
		return api.List[api.Delivery]{}, err
	}
	items, err := s.store.ListDeliveries(ctx, store.DeliveryFilter{WebhookID: webhookID, After: p.Cursor, Limit: limit + 1})
	if err != nil {
		return api.List[api.Delivery]{}, err
	}
	return page(items, limit, func(d api.Delivery) string { return d.ID }), nil
}
