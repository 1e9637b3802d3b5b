package cove

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/cove-dev/cove/api"
)

func webhookPath(id string) string { return "/v1/webhooks/" + url.PathEscape(id) }

func pageValues(limit int, cursor string) url.Values {
	v := url.Values{}
	if limit > 0 {
		v.Set("limit", strconv.Itoa(limit))
	}
	if cursor != "" {
		v.Set("cursor", cursor)
	}
	return v
}

// CreateWebhook registers a URL for the team's events (req.Events: exact
// types, families such as "sandbox.*", or "*"; none means all). The answer
// holds the signing secret, shown only this once.
func (c *Client) CreateWebhook(ctx context.Context, req api.CreateWebhookRequest) (api.CreateWebhookResponse, error) {
	var out api.CreateWebhookResponse
	err := c.do(ctx, http.MethodPost, "/v1/webhooks", nil, req, &out)
	return out, err
}

// ListWebhooks returns one page of the team's webhooks.
func (c *Client) ListWebhooks(ctx context.Context, limit int, cursor string) (api.List[api.Webhook], error) {
	var out api.List[api.Webhook]
	err := c.do(ctx, http.MethodGet, "/v1/webhooks", pageValues(limit, cursor), nil, &out)
	return out, err
}

// GetWebhook returns one webhook (never its secret).
func (c *Client) GetWebhook(ctx context.Context, id string) (api.Webhook, error) {
	var out api.Webhook
	err := c.do(ctx, http.MethodGet, webhookPath(id), nil, nil, &out)
	return out, err
}

// DeleteWebhook removes a webhook and its pending deliveries.
func (c *Client) DeleteWebhook(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, webhookPath(id), nil, nil, nil)
}

// ListDeliveries returns one page of a webhook's deliveries, newest first,
// with their latest attempts.
func (c *Client) ListDeliveries(ctx context.Context, id string, limit int, cursor string) (api.List[api.Delivery], error) {
	var out api.List[api.Delivery]
	err := c.do(ctx, http.MethodGet, webhookPath(id)+"/deliveries", pageValues(limit, cursor), nil, &out)
	return out, err
}

// VerifyWebhook checks a delivery a receiver got: the webhook-signature
// header must hold a v1 signature of "webhook-id.webhook-timestamp.body"
// made with secret (whsec_<base64>), and the timestamp must be within
// tolerance of now (replays of old deliveries fail; 5 minutes is usual).
// Receivers should also drop a webhook-id they have already handled.
func VerifyWebhook(secret string, h http.Header, body []byte, tolerance time.Duration) error {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil || !strings.HasPrefix(secret, "whsec_") {
		return errors.New("webhook secret is not whsec_<base64>")
	}
	id, ts := h.Get("webhook-id"), h.Get("webhook-timestamp")
	if id == "" || ts == "" {
		return errors.New("webhook-id or webhook-timestamp missing")
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("webhook-timestamp %q is not Unix seconds", ts)
	}
	if d := time.Since(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return fmt.Errorf("webhook-timestamp is %v away from now, more than %v", d.Round(time.Second), tolerance)
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + ts + "."))
	mac.Write(body)
	want := mac.Sum(nil)
	for _, s := range strings.Fields(h.Get("webhook-signature")) {
		if v, sig, ok := strings.Cut(s, ","); ok && v == "v1" {
			if got, err := base64.StdEncoding.DecodeString(sig); err == nil && hmac.Equal(got, want) {
				return nil
			}
		}
	}
	return errors.New("no webhook-signature matches")
}
