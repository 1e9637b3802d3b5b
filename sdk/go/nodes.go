package cove

import (
	"context"
	"net/http"
	"net/url"

	"github.com/cove-dev/cove/api"
)

// ListNodes lists a fleet's nodes (admin key; a server without a fleet
// answers not_found).
func (c *Client) ListNodes(ctx context.Context) ([]api.Node, error) {
	var out api.List[api.Node]
	err := c.do(ctx, http.MethodGet, "/v1/nodes", nil, nil, &out)
	return out.Items, err
}

// DrainNode stops placing new sandboxes on a node (by ID or name).
func (c *Client) DrainNode(ctx context.Context, ref string) (api.Node, error) {
	var n api.Node
	err := c.do(ctx, http.MethodPost, "/v1/nodes/"+url.PathEscape(ref)+"/drain", nil, nil, &n)
	return n, err
}

// UndrainNode lets a drained node take new sandboxes again.
func (c *Client) UndrainNode(ctx context.Context, ref string) (api.Node, error) {
	var n api.Node
	err := c.do(ctx, http.MethodPost, "/v1/nodes/"+url.PathEscape(ref)+"/undrain", nil, nil, &n)
	return n, err
}

// RemoveNode revokes a node; its sandboxes are settled as a lost node's.
func (c *Client) RemoveNode(ctx context.Context, ref string) error {
	return c.do(ctx, http.MethodDelete, "/v1/nodes/"+url.PathEscape(ref), nil, nil, nil)
}

// RotateJoinToken makes a new join token for `cove node` to join with; the
// previous one stops working.
func (c *Client) RotateJoinToken(ctx context.Context) (api.JoinToken, error) {
	var t api.JoinToken
	err := c.do(ctx, http.MethodPost, "/v1/nodes/join-token", nil, nil, &t)
	return t, err
}
