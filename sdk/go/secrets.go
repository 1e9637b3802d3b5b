package cove

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"github.com/cove-dev/cove/api"
)

func secretPath(name string) string { return "/v1/secrets/" + url.PathEscape(name) }

// PutSecret creates or replaces the team's secret name with value. The
// server never returns a value; sandboxes and commands name secrets in
// their Secrets fields, and each command gets the value as it is when the
// command starts.
func (c *Client) PutSecret(ctx context.Context, name, value string) (api.Secret, error) {
	var out api.Secret
	err := c.do(ctx, http.MethodPut, secretPath(name), nil, api.PutSecretRequest{Value: value}, &out)
	return out, err
}

// GetSecret describes a secret: its name and times.
func (c *Client) GetSecret(ctx context.Context, name string) (api.Secret, error) {
	var out api.Secret
	err := c.do(ctx, http.MethodGet, secretPath(name), nil, nil, &out)
	return out, err
}

// ListSecrets lists a page of the team's secrets by name; cursor is the
// NextCursor of the page before.
func (c *Client) ListSecrets(ctx context.Context, limit int, cursor string) (api.List[api.Secret], error) {
	v := url.Values{}
	if limit > 0 {
		v.Set("limit", strconv.Itoa(limit))
	}
	if cursor != "" {
		v.Set("cursor", cursor)
	}
	var out api.List[api.Secret]
	err := c.do(ctx, http.MethodGet, "/v1/secrets", v, nil, &out)
	return out, err
}

// DeleteSecret deletes a secret.
func (c *Client) DeleteSecret(ctx context.Context, name string) error {
	return c.do(ctx, http.MethodDelete, secretPath(name), nil, nil, nil)
}
