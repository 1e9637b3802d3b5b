package api

import "time"

// Webhook is an endpoint that receives a team's events as signed POSTs
// (Standard Webhooks: webhook-id, webhook-timestamp, webhook-signature).
type Webhook struct {
	ID     string `json:"id"`
	TeamID string `json:"team_id"`
	URL    string `json:"url"`
	// Events are the event types delivered: exact types
	// ("sandbox.running"), a family ("sandbox.*") or "*" for all.
	Events    []string  `json:"events"`
	CreatedAt time.Time `json:"created_at"`
}

// CreateWebhookRequest is the body of POST /v1/webhooks. Events defaults
// to ["*"].
type CreateWebhookRequest struct {
	URL    string   `json:"url"`
	Events []string `json:"events,omitempty"`
}

// CreateWebhookResponse answers POST /v1/webhooks. The secret
// (whsec_<base64>) signs every delivery and is shown only here.
type CreateWebhookResponse struct {
	Webhook Webhook `json:"webhook"`
	Secret  string  `json:"secret"`
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

// Delivery is one event sent to one webhook, with its attempts.
type Delivery struct {
	ID        string        `json:"id"`
	WebhookID string        `json:"webhook_id"`
	EventID   string        `json:"event_id"`
	EventType string        `json:"event_type"`
	State     DeliveryState `json:"state"`
	// Reason says why a delivery failed without (more) attempts:
	// ReasonBacklogFull.
	Reason string `json:"reason,omitempty"`
	// AttemptCount counts every attempt; Attempts holds the latest ones
	// (at most 20), oldest first.
	AttemptCount int               `json:"attempt_count"`
	Attempts     []DeliveryAttempt `json:"attempts"`
	// NextAttemptAt is when a pending delivery is tried next.
	NextAttemptAt *time.Time `json:"next_attempt_at,omitempty"`
	CreatedAt     time.Time  `json:"created_at"`
}

// DeliveryAttempt is one POST of a delivery: the receiver's status code
// (0 when none came: a refused or failed connection, a timeout), how long
// it took, and what went wrong.
type DeliveryAttempt struct {
	Time       time.Time `json:"time"`
	StatusCode int       `json:"status_code"`
	LatencyMS  int64     `json:"latency_ms"`
	Error      string    `json:"error,omitempty"`
}
