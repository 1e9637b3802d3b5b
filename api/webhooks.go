package api

import "time"

// Webhook is an endpoint that receives a team's events as signed POSTs
// (Standard Webhooks: webhook-id, webhook-timestamp, webhook-signature).
type Webhook struct {
	// whk_…
	ID     string `json:"id"`
	TeamID string `json:"team_id"`
	URL    string `json:"url"`
	// Events are the event types delivered: exact types
	// ("sandbox.running"), a family ("sandbox.*") or "*" for all.
	Events    []string  `json:"events"`
	CreatedAt time.Time `json:"created_at"`
}

// CreateWebhookRequest is the body of POST /v1/webhooks. events defaults
// to ["*"].
type CreateWebhookRequest struct {
	URL string `json:"url" schema:"maxLength=2048"`
	// Default ["*"].
	Events []string `json:"events,omitempty" schema:"maxItems=64"`
}

// CreateWebhookResponse answers POST /v1/webhooks. The secret
// (whsec_<base64>) signs every delivery and is shown only here.
type CreateWebhookResponse struct {
	Webhook Webhook `json:"webhook"`
	// whsec_<base64>: the HMAC key is the base64-decoded bytes. Shown only
	// here.
	Secret string `json:"secret"`
}

// ReasonBacklogFull is the reason of a delivery failed because its team's
// pending backlog was full (cove serve --webhook-backlog); an
// EventWebhookDropped event says how many were.
const ReasonBacklogFull = "backlog_full"

// EventWebhookDropped is the event that says deliveries were dropped:
// data {"dropped": n, "reason": "backlog_full", "backlog": bound,
// "webhooks": {webhook ID: n}}. It goes to each webhook that lost
// deliveries, whatever its events, before their backlog.
const EventWebhookDropped = "webhook.dropped"

// DeliveryState is where a delivery stands.
type DeliveryState string

// Delivery states: pending until an attempt is answered with a 2xx
// (delivered) or the retry window closes (failed).
const (
	DeliveryPending   DeliveryState = "pending"
	DeliveryDelivered DeliveryState = "delivered"
	DeliveryFailed    DeliveryState = "failed"
)

// Values lists the delivery states: the enum of the OpenAPI document.
func (DeliveryState) Values() []string {
	return []string{string(DeliveryPending), string(DeliveryDelivered), string(DeliveryFailed)}
}

// Delivery is one event sent to one webhook, with its attempts.
type Delivery struct {
	// whd_…; also the webhook-id header of every attempt
	ID        string        `json:"id"`
	WebhookID string        `json:"webhook_id"`
	EventID   string        `json:"event_id"`
	EventType string        `json:"event_type"`
	State     DeliveryState `json:"state"`
	// Why a failed delivery failed without (more) attempts: backlog_full
	// (ReasonBacklogFull) when the team's pending backlog (cove serve
	// --webhook-backlog) was full; a webhook.dropped event says how many.
	Reason string `json:"reason,omitempty" schema:"enum=backlog_full"`
	// AttemptCount counts every attempt; Attempts holds the latest ones
	// (at most 20), oldest first.
	AttemptCount int `json:"attempt_count"`
	// The latest 20 attempts, oldest first.
	Attempts []DeliveryAttempt `json:"attempts"`
	// NextAttemptAt is when a pending delivery is tried next.
	NextAttemptAt *time.Time `json:"next_attempt_at,omitempty"`
	CreatedAt     time.Time  `json:"created_at"`
}

// DeliveryAttempt is one POST of a delivery: the receiver's status code
// (0 when none came: a refused or failed connection, a timeout), how long
// it took, and what went wrong.
type DeliveryAttempt struct {
	Time time.Time `json:"time"`
	// 0 when no answer came
	StatusCode int    `json:"status_code"`
	LatencyMS  int64  `json:"latency_ms"`
	Error      string `json:"error,omitempty"`
}
