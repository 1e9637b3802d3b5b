package server

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/id"
	"github.com/cove-dev/cove/internal/secrets"
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
	kr, err := s.keyring()
	if err != nil {
		return api.CreateWebhookResponse{}, err
	}
	w := store.Webhook{Webhook: api.Webhook{ID: id.New("whk"), TeamID: teamID, URL: req.URL, Events: events, CreatedAt: s.now()}}
	secret := webhooks.NewSecret()
	if w.Secret, err = sealWebhookSecret(kr, teamID, w.ID, secret); err != nil {
		return api.CreateWebhookResponse{}, err
	}
	if err := s.store.CreateWebhook(ctx, w); err != nil {
		return api.CreateWebhookResponse{}, err
	}
	s.log.Info("webhook created", "webhook", w.ID, "team", teamID, "events", events)
	return api.CreateWebhookResponse{Webhook: w.Webhook, Secret: secret}, nil
}

// A webhook's signing secret is sealed at rest like a team's secrets,
// under the same keyring, bound to its team and to the name below: a
// sealed value copied to another webhook's row, or to a team secret's,
// does not open there (':' is in no team secret's name).
func webhookSealName(webhookID string) string { return "webhook:" + webhookID }

func sealWebhookSecret(kr *secrets.Keyring, teamID, webhookID, secret string) (string, error) {
	sealed, err := kr.Seal(teamID, webhookSealName(webhookID), []byte(secret))
	if err != nil {
		return "", fmt.Errorf("seal the secret of webhook %s: %w", webhookID, err)
	}
	return sealed.Text(), nil
}

// OpenWebhookSecret opens the stored secret of a team's webhook: what the
// dispatcher signs with (webhooks.Config.OpenSecret). A value stored in
// clear does not open: SealWebhookSecrets sealed every one at start.
func (s *Server) OpenWebhookSecret(teamID, webhookID, stored string) (string, error) {
	kr, err := s.keyring()
	if err != nil {
		return "", err
	}
	sealed, err := secrets.ParseText(stored)
	if err != nil {
		return "", fmt.Errorf("secret of webhook %s: %w", webhookID, err)
	}
	v, err := kr.Open(teamID, webhookSealName(webhookID), sealed)
	if err != nil {
		return "", fmt.Errorf("secret of webhook %s: %w", webhookID, err)
	}
	return string(v), nil
}

// SealWebhookSecrets seals, under the current key, every webhook secret
// stored in clear (by a server from before secrets were sealed) or sealed
// under an old key of a rotation, and reports how many. Run it at start,
// before the dispatcher and the API: then no secret is left in clear. A
// secret sealed under a key the server was not given, or one that does
// not open, fails it, as RekeySecrets does.
func (s *Server) SealWebhookSecrets(ctx context.Context) (int, error) {
	kr, err := s.keyring()
	if err != nil {
		return 0, err
	}
	n, after := 0, ""
	for {
		page, err := s.store.ListWebhooks(ctx, store.WebhookFilter{After: after, Limit: 500})
		if err != nil {
			return n, err
		}
		for _, w := range page {
			after = w.ID
			secret := w.Secret
			if secrets.IsText(w.Secret) {
				sealed, err := secrets.ParseText(w.Secret)
				if err != nil {
					return n, fmt.Errorf("secret of webhook %s of team %s: %w", w.ID, w.TeamID, err)
				}
				if sealed.KeyID == kr.CurrentID() {
					continue
				}
				v, err := kr.Open(w.TeamID, webhookSealName(w.ID), sealed)
				if errors.Is(err, secrets.ErrUnknownKey) {
					return n, fmt.Errorf("the secret of webhook %s of team %s is sealed under key %s, not the secrets key (%s): give that key as --secrets-key-file, or as --secrets-old-key-file to re-encrypt under the new one", w.ID, w.TeamID, sealed.KeyID, kr.CurrentID())
				}
				if err != nil {
					return n, fmt.Errorf("secret of webhook %s of team %s: %w", w.ID, w.TeamID, err)
				}
				secret = string(v)
			}
			next, err := sealWebhookSecret(kr, w.TeamID, w.ID, secret)
			if err != nil {
				return n, err
			}
			ok, err := s.store.ReplaceWebhookSecret(ctx, w.ID, w.Secret, next)
			if err != nil {
				return n, err
			}
			if ok {
				n++
			}
		}
		if len(page) < 500 {
			return n, nil
		}
	}
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
	secret, err := s.OpenWebhookSecret(teamID, webhookID, w.Secret)
	if err != nil {
		return api.CreateWebhookResponse{}, fmt.Errorf("answer the create of webhook %s again: %w", webhookID, err)
	}
	return api.CreateWebhookResponse{Webhook: w.Webhook, Secret: secret}, nil
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
