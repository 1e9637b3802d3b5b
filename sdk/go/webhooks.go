package cove

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

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
