package cove

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"github.com/cove-dev/cove/api"
)

func volumePath(ref string) string { return "/v1/volumes/" + url.PathEscape(ref) }

// CreateVolume creates a volume of the team: a disk of sizeMiB that
// outlives sandboxes, mounted by those created with it in
// api.CreateSandboxRequest.Volumes.
func (c *Client) CreateVolume(ctx context.Context, name string, sizeMiB int64) (api.Volume, error) {
	var v api.Volume
	err := c.do(ctx, http.MethodPost, "/v1/volumes", nil, api.CreateVolumeRequest{Name: name, SizeMiB: sizeMiB}, &v)
	return v, err
}

// GetVolume returns a volume by ID or name, with the sandboxes that
// mount it.
func (c *Client) GetVolume(ctx context.Context, ref string) (api.Volume, error) {
	var v api.Volume
	err := c.do(ctx, http.MethodGet, volumePath(ref), nil, nil, &v)
	return v, err
}

// ListVolumes lists a page of the team's volumes.
func (c *Client) ListVolumes(ctx context.Context, limit int, cursor string) (api.List[api.Volume], error) {
	q := url.Values{}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	var l api.List[api.Volume]
	err := c.do(ctx, http.MethodGet, "/v1/volumes", q, nil, &l)
	return l, err
}

// DeleteVolume deletes a volume and its files; one that sandboxes not
// terminated mount answers 409 naming them.
func (c *Client) DeleteVolume(ctx context.Context, ref string) error {
	return c.do(ctx, http.MethodDelete, volumePath(ref), nil, nil, nil)
}
