package cove

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/cove-dev/cove/api"
)

// ListTeams lists every team (admin key), or the caller's own team.
func (c *Client) ListTeams(ctx context.Context) ([]api.Team, error) {
	var out api.List[api.Team]
	err := c.do(ctx, http.MethodGet, "/v1/teams", nil, nil, &out)
	return out.Items, err
}

// RevokeKey revokes an API key: requests with it are refused from then on.
func (c *Client) RevokeKey(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, "/v1/keys/"+url.PathEscape(id), nil, nil, nil)
}

// OpenAPI returns the server's OpenAPI document.
func (c *Client) OpenAPI(ctx context.Context) ([]byte, error) {
	resp, err := c.send(ctx, http.MethodGet, "/v1/openapi.json", nil, nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(resp.Body)
}

// Stdout copies a command's recorded stdout, raw, to w: what it wrote so
// far, or all of it once it has ended.
func (c *Client) Stdout(ctx context.Context, ref, id string, w io.Writer) (int64, error) {
	return c.rawStream(ctx, ref, id, "stdout", w)
}

// Stderr copies a command's recorded stderr, raw, to w.
func (c *Client) Stderr(ctx context.Context, ref, id string, w io.Writer) (int64, error) {
	return c.rawStream(ctx, ref, id, "stderr", w)
}

func (c *Client) rawStream(ctx context.Context, ref, id, name string, w io.Writer) (int64, error) {
	resp, err := c.send(ctx, http.MethodGet, commandPath(ref, id)+"/"+name, nil, nil)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	n, err := io.Copy(w, resp.Body)
	if err == nil && resp.ContentLength >= 0 && n != resp.ContentLength {
		err = fmt.Errorf("%s ended after %d of %d bytes: %w", name, n, resp.ContentLength, io.ErrUnexpectedEOF)
	}
	return n, err
}
