package store

import (
	"context"
	"time"

	"github.com/cove-dev/cove/api"
)

// Webhooks persists webhook endpoints and their outbox of deliveries.
//
// The outbox is filled by AppendEvent: in the transaction that appends an
// event it enqueues one pending delivery for each of the team's webhooks
// whose Events match the event's type (EventMatches), due at once. So an
// event is never stored without its deliveries, and a delivery survives a
// crash until an attempt is recorded for it. DeleteEventsBefore drops the
// deliveries of the events it drops.
type Webhooks interface {
	// CreateWebhook stores a webhook; its team must exist.
	CreateWebhook(ctx context.Context, w Webhook) error
	// GetWebhook finds a webhook of the team; teamID "" finds it in any
	// team (for the dispatcher's bookkeeping, never for a request).
	GetWebhook(ctx context.Context, teamID, id string) (Webhook, error)
	// ListWebhooks lists a team's webhooks by ID, paged like SandboxFilter.
	ListWebhooks(ctx context.Context, f WebhookFilter) ([]Webhook, error)
	// DeleteWebhook removes a webhook of the team and its deliveries.
	DeleteWebhook(ctx context.Context, teamID, id string) error
	// ReplaceWebhookSecret replaces a webhook's stored secret by next if
	// it is still prev (for sealing, at start, what was stored before);
	// it reports whether it replaced it.
	ReplaceWebhookSecret(ctx context.Context, id, prev, next string) (bool, error)

	// DueDeliveries returns, for each team, the next pending delivery
	// due at t (urgent ones first, then the oldest) of each of at most
	// perTeam of its webhooks, ordered by team and then delivery, with
	// what sending it needs. A delivery whose event was dropped comes back
	// with a zero Event.ID.
	DueDeliveries(ctx context.Context, t time.Time, perTeam int) ([]DueDelivery, error)
	// NextDeliveryAt returns when the earliest pending delivery is due;
	// ok is false when none is pending.
	NextDeliveryAt(ctx context.Context) (next time.Time, ok bool, err error)
	// ClaimDelivery takes a due delivery for one attempt: when it is still
	// pending, due at now and has attempts attempts (as DueDeliveries read
	// it), its next attempt moves to until and the answer is true;
	// otherwise (another dispatcher claimed or tried it meanwhile) false.
	// A dispatcher that dies mid-attempt leaves it due again at until.
	ClaimDelivery(ctx context.Context, deliveryID string, attempts int, now, until time.Time) (bool, error)
	// RecordAttempt adds an attempt to a delivery and moves it to state;
	// next is when a pending delivery is tried again (nil otherwise). It
	// keeps the latest MaxAttemptsKept attempts and counts them all.
	RecordAttempt(ctx context.Context, deliveryID string, a api.DeliveryAttempt, state api.DeliveryState, next *time.Time) error
	// ListDeliveries lists a webhook's deliveries, newest first, paged by
	// ID (After is the last ID seen).
	ListDeliveries(ctx context.Context, f DeliveryFilter) ([]api.Delivery, error)
}

// DefaultWebhookBacklog bounds a team's pending deliveries when the store
// is not told otherwise. Past the bound, appending an event fails the
// team's oldest pending deliveries (reason api.ReasonBacklogFull) and adds
// an api.EventWebhookDropped event, delivered before the rest.
const DefaultWebhookBacklog = 10000

// MaxAttemptsKept is how many of a delivery's latest attempts a store keeps.
const MaxAttemptsKept = 20

// Webhook is a stored webhook: its secret is kept to sign deliveries,
// sealed by the control plane before the store sees it (the store keeps
// the text it is given).
type Webhook struct {
	api.Webhook
	Secret string
}

// WebhookFilter selects a team's webhooks.
type WebhookFilter struct {
	TeamID string
	After  string
	Limit  int
}

// DeliveryFilter selects one webhook's deliveries.
type DeliveryFilter struct {
	WebhookID string
	After     string
	Limit     int
}

// DueDelivery is a pending delivery and what sending it needs.
type DueDelivery struct {
	TeamID   string // the webhook's team
	Delivery api.Delivery
	Event    api.Event
	URL      string
	Secret   string // as stored: sealed
}

// EventMatches reports whether an event type is one of patterns: an exact
// type, a family ending in ".*" ("sandbox.*"), or "*".
func EventMatches(patterns []string, typ string) bool {
	for _, p := range patterns {
		switch {
		case p == "*", p == typ:
			return true
		case len(p) > 2 && p[len(p)-2:] == ".*" && len(typ) > len(p)-1 && typ[:len(p)-1] == p[:len(p)-1]:
			return true
		}
	}
	return false
}
