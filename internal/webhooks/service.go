package webhooks

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/page"
	"github.com/cove-dev/cove/internal/id"
	"github.com/cove-dev/cove/internal/secrets"
	"github.com/cove-dev/cove/internal/store"
)

// Bounds of webhooks.
const (
	MaxPerTeam = 50
	maxEvents  = 64
)

// eventPatternRE is an event type, a family ("sandbox.*") or "*".
var eventPatternRE = regexp.MustCompile(`^(\*|[a-z][a-z_]*(\.[a-z][a-z_]*)*(\.\*)?)$`)

// Hooks is what the service needs of the store: the teams' webhooks and
// their deliveries.
type Hooks interface {
	CreateWebhook(ctx context.Context, w store.Webhook) error
	GetWebhook(ctx context.Context, teamID, id string) (store.Webhook, error)
	ListWebhooks(ctx context.Context, f store.WebhookFilter) ([]store.Webhook, error)
	DeleteWebhook(ctx context.Context, teamID, id string) error
	ReplaceWebhookSecret(ctx context.Context, id, prev, next string) (bool, error)
	ListDeliveries(ctx context.Context, f store.DeliveryFilter) ([]api.Delivery, error)
}

// Keys gives the keyring the signing secrets are sealed under (the
// secrets service's), or the error to answer when there is none.
type Keys interface {
	Keyring() (*secrets.Keyring, error)
}

// ServiceConfig is what the webhooks' service is told by the server's
// configuration.
type ServiceConfig struct {
	// AllowPrivate lets webhooks name private addresses (as the
	// dispatcher's Config.AllowPrivate).
	AllowPrivate bool
}

// Service keeps the teams' webhooks: created with a signing secret shown
// once and sealed at rest, listed, deleted, and their deliveries listed.
// The Dispatcher sends what the store's outbox holds for them.
type Service struct {
	cfg  ServiceConfig
	st   Hooks
	keys Keys
	log  *slog.Logger
	now  func() time.Time
}

// NewService returns the service over st, sealing secrets under keys'
// keyring; now is its clock.
func NewService(cfg ServiceConfig, st Hooks, keys Keys, log *slog.Logger, now func() time.Time) *Service {
	return &Service{cfg: cfg, st: st, keys: keys, log: log, now: now}
}

func invalid(format string, args ...any) error {
	return api.Errorf(api.CodeInvalidArgument, format, args...)
}

// Create registers an endpoint for the team's events and returns its
// signing secret, which is shown only here.
func (s *Service) Create(ctx context.Context, teamID string, req api.CreateWebhookRequest) (api.CreateWebhookResponse, error) {
	if err := page.Scoped(teamID); err != nil {
		return api.CreateWebhookResponse{}, err
	}
	if err := CheckURL(ctx, req.URL, s.cfg.AllowPrivate); err != nil {
		return api.CreateWebhookResponse{}, err
	}
	events := req.Events
	if len(events) == 0 {
		events = []string{"*"}
	}
	if len(events) > maxEvents {
		return api.CreateWebhookResponse{}, invalid("events: at most %d entries", maxEvents)
	}
	for _, e := range events {
		if len(e) > 128 || !eventPatternRE.MatchString(e) {
			return api.CreateWebhookResponse{}, invalid("events: %q is not an event type (sandbox.running), a family (sandbox.*) or *", e)
		}
	}
	events = slices.Compact(slices.Sorted(slices.Values(events)))
	wid := id.For(ctx, "whk")
	if id.Derived(ctx) {
		// The ID is derived from an Idempotency-Key: a second attempt of
		// the request (its first on a replica that died) answers the
		// webhook the first attempt made.
		if resp, err := s.Created(ctx, teamID, wid); err == nil {
			return resp, nil
		} else if api.ErrorCode(err) != api.CodeNotFound {
			return api.CreateWebhookResponse{}, err
		}
	}
	n, err := s.st.ListWebhooks(ctx, store.WebhookFilter{TeamID: teamID, Limit: MaxPerTeam})
	if err != nil {
		return api.CreateWebhookResponse{}, err
	}
	if len(n) >= MaxPerTeam {
		return api.CreateWebhookResponse{}, api.Errorf(api.CodeResourceExhausted,
			"the team has %d webhooks, the most it may have; delete one first", MaxPerTeam)
	}
	kr, err := s.keys.Keyring()
	if err != nil {
		return api.CreateWebhookResponse{}, err
	}
	// The time is cut to the microsecond every store keeps, so that the
	// answer made now and the one an Idempotency-Key replays from the
	// store (Created) are the same.
	created := s.now().UTC().Truncate(time.Microsecond)
	w := store.Webhook{Webhook: api.Webhook{ID: wid, TeamID: teamID, URL: req.URL, Events: events, CreatedAt: created}}
	secret := NewSecret()
	if w.Secret, err = sealSecret(kr, teamID, w.ID, secret); err != nil {
		return api.CreateWebhookResponse{}, err
	}
	if err := s.st.CreateWebhook(ctx, w); err != nil {
		return api.CreateWebhookResponse{}, err
	}
	s.log.Info("webhook created", "webhook", w.ID, "team", teamID, "events", events)
	return api.CreateWebhookResponse{Webhook: w.Webhook, Secret: secret}, nil
}

// A webhook's signing secret is sealed at rest like a team's secrets,
// under the same keyring, bound to its team and to the name below: a
// sealed value copied to another webhook's row, or to a team secret's,
// does not open there (':' is in no team secret's name).
func sealName(webhookID string) string { return "webhook:" + webhookID }

func sealSecret(kr *secrets.Keyring, teamID, webhookID, secret string) (string, error) {
	sealed, err := kr.Seal(teamID, sealName(webhookID), []byte(secret))
	if err != nil {
		return "", fmt.Errorf("seal the secret of webhook %s: %w", webhookID, err)
	}
	return sealed.Text(), nil
}

// OpenSecret opens the stored secret of a team's webhook: what the
// dispatcher signs with (Config.OpenSecret). A value stored in clear does
// not open: SealSecrets sealed every one at start.
func (s *Service) OpenSecret(teamID, webhookID, stored string) (string, error) {
	kr, err := s.keys.Keyring()
	if err != nil {
		return "", err
	}
	sealed, err := secrets.ParseText(stored)
	if err != nil {
		return "", fmt.Errorf("secret of webhook %s: %w", webhookID, err)
	}
	v, err := kr.Open(teamID, sealName(webhookID), sealed)
	if err != nil {
		return "", fmt.Errorf("secret of webhook %s: %w", webhookID, err)
	}
	return string(v), nil
}

// SealSecrets seals, under the current key, every webhook secret stored
// in clear (by a server from before secrets were sealed) or sealed under
// an old key of a rotation, and reports how many. Run it at start, before
// the dispatcher and the API: then no secret is left in clear. A secret
// sealed under a key the server was not given, or one that does not open,
// fails it, as the secrets' rekey does.
func (s *Service) SealSecrets(ctx context.Context) (int, error) {
	kr, err := s.keys.Keyring()
	if err != nil {
		return 0, err
	}
	n, after := 0, ""
	for {
		list, err := s.st.ListWebhooks(ctx, store.WebhookFilter{After: after, Limit: 500})
		if err != nil {
			return n, err
		}
		for _, w := range list {
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
				v, err := kr.Open(w.TeamID, sealName(w.ID), sealed)
				if errors.Is(err, secrets.ErrUnknownKey) {
					return n, fmt.Errorf("the secret of webhook %s of team %s is sealed under key %s, not the secrets key (%s): give that key as --secrets-key-file, or as --secrets-old-key-file to re-encrypt under the new one", w.ID, w.TeamID, sealed.KeyID, kr.CurrentID())
				}
				if err != nil {
					return n, fmt.Errorf("secret of webhook %s of team %s: %w", w.ID, w.TeamID, err)
				}
				secret = string(v)
			}
			next, err := sealSecret(kr, w.TeamID, w.ID, secret)
			if err != nil {
				return n, err
			}
			ok, err := s.st.ReplaceWebhookSecret(ctx, w.ID, w.Secret, next)
			if err != nil {
				return n, err
			}
			if ok {
				n++
			}
		}
		if len(list) < 500 {
			return n, nil
		}
	}
}

// Created answers again what Create answered for one of the team's
// webhooks, its secret read again from the store: a replayed create
// (Idempotency-Key) keeps no secret of its own.
func (s *Service) Created(ctx context.Context, teamID, webhookID string) (api.CreateWebhookResponse, error) {
	if err := page.Scoped(teamID); err != nil {
		return api.CreateWebhookResponse{}, err
	}
	w, err := s.st.GetWebhook(ctx, teamID, webhookID)
	if err != nil {
		return api.CreateWebhookResponse{}, err
	}
	secret, err := s.OpenSecret(teamID, webhookID, w.Secret)
	if err != nil {
		return api.CreateWebhookResponse{}, fmt.Errorf("answer the create of webhook %s again: %w", webhookID, err)
	}
	return api.CreateWebhookResponse{Webhook: w.Webhook, Secret: secret}, nil
}

// Get returns one of the team's webhooks (never its secret).
func (s *Service) Get(ctx context.Context, teamID, webhookID string) (api.Webhook, error) {
	if err := page.Scoped(teamID); err != nil {
		return api.Webhook{}, err
	}
	w, err := s.st.GetWebhook(ctx, teamID, webhookID)
	return w.Webhook, err
}

// List returns a page of the team's webhooks.
func (s *Service) List(ctx context.Context, teamID string, p page.Page) (api.List[api.Webhook], error) {
	if err := page.Scoped(teamID); err != nil {
		return api.List[api.Webhook]{}, err
	}
	limit, err := p.Size()
	if err != nil {
		return api.List[api.Webhook]{}, err
	}
	hooks, err := s.st.ListWebhooks(ctx, store.WebhookFilter{TeamID: teamID, After: p.Cursor, Limit: limit + 1})
	if err != nil {
		return api.List[api.Webhook]{}, err
	}
	items := make([]api.Webhook, len(hooks))
	for i, w := range hooks {
		items[i] = w.Webhook
	}
	return page.Cut(items, limit, func(w api.Webhook) string { return w.ID }), nil
}

// Delete removes one of the team's webhooks; its pending deliveries are
// dropped.
func (s *Service) Delete(ctx context.Context, teamID, webhookID string) error {
	if err := page.Scoped(teamID); err != nil {
		return err
	}
	if err := s.st.DeleteWebhook(ctx, teamID, webhookID); err != nil {
		return err
	}
	s.log.Info("webhook deleted", "webhook", webhookID, "team", teamID)
	return nil
}

// Deliveries returns a page of a webhook's deliveries, newest first.
func (s *Service) Deliveries(ctx context.Context, teamID, webhookID string, p page.Page) (api.List[api.Delivery], error) {
	if _, err := s.Get(ctx, teamID, webhookID); err != nil {
		return api.List[api.Delivery]{}, err
	}
	limit, err := p.Size()
	if err != nil {
		return api.List[api.Delivery]{}, err
	}
	items, err := s.st.ListDeliveries(ctx, store.DeliveryFilter{WebhookID: webhookID, After: p.Cursor, Limit: limit + 1})
	if err != nil {
		return api.List[api.Delivery]{}, err
	}
	return page.Cut(items, limit, func(d api.Delivery) string { return d.ID }), nil
}
