package cove

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"

	"github.com/cove-dev/cove/api"
)

// ImportImage imports an image from r, an OCI image layout archive or a
// `docker save` archive, as the team's image called name; settings may be
// nil.
func (c *Client) ImportImage(ctx context.Context, name string, settings *api.ImageSettings, r io.Reader) (api.Image, error) {
	q := url.Values{"name": {name}}
	if settings != nil {
		b, err := json.Marshal(settings)
		if err != nil {
			return api.Image{}, err
		}
		q.Set("settings", string(b))
	}
	req, err := c.newRequest(ctx, http.MethodPost, "/v1/images", q, r)
	if err != nil {
		return api.Image{}, err
	}
	req.Header.Set("Content-Type", "application/x-tar")
	resp, err := c.doRequest(req)
	if err != nil {
		return api.Image{}, err
	}
	var img api.Image
	return img, decodeJSON(resp, &img)
}

// Images lists the images the team may see.
func (c *Client) Images(ctx context.Context) (api.List[api.Image], error) {
	var out api.List[api.Image]
	err := c.do(ctx, http.MethodGet, "/v1/images", nil, nil, &out)
	return out, err
}

// GetImage returns an image by ID or name.
func (c *Client) GetImage(ctx context.Context, ref string) (api.Image, error) {
	var out api.Image
	err := c.do(ctx, http.MethodGet, imagePath(ref), nil, nil, &out)
	return out, err
}

// UpdateImage changes an image's settings; fields left nil keep theirs.
func (c *Client) UpdateImage(ctx context.Context, ref string, settings api.ImageSettings) (api.Image, error) {
	var out api.Image
	err := c.do(ctx, http.MethodPatch, imagePath(ref), nil, settings, &out)
	return out, err
}

// DeleteImage deletes an image no sandbox uses.
func (c *Client) DeleteImage(ctx context.Context, ref string) error {
	return c.do(ctx, http.MethodDelete, imagePath(ref), nil, nil, nil)
}

func imagePath(ref string) string { return "/v1/images/" + url.PathEscape(ref) }
