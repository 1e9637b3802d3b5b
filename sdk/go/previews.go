package cove

import (
	"context"
	"net/http"
	"net/url"

	"github.com/cove-dev/cove/api"
)

// CreatePreview publishes a port of a sandbox. A private preview's token
// and one-time link are in the answer only.
func (c *Client) CreatePreview(ctx context.Context, ref string, req api.CreatePreviewRequest) (api.Preview, error) {
	var out api.Preview
	err := c.do(ctx, http.MethodPost, sandboxPath(ref)+"/previews", nil, req, &out)
	return out, err
}

// Previews lists a sandbox's previews.
func (c *Client) Previews(ctx context.Context, ref string) ([]api.Preview, error) {
	var out api.List[api.Preview]
	if err := c.do(ctx, http.MethodGet, sandboxPath(ref)+"/previews", nil, nil, &out); err != nil {
		return nil, err
	}
	return out.Items, nil
}

// DeletePreview unpublishes a preview.
func (c *Client) DeletePreview(ctx context.Context, ref, id string) error {
	return c.do(ctx, http.MethodDelete, sandboxPath(ref)+"/previews/"+url.PathEscape(id), nil, nil, nil)
}

// Admission describes the key's own team: its admission flags and limits.
func (c *Client) Admission(ctx context.Context) (api.TeamMe, error) {
	var out api.TeamMe
	err := c.do(ctx, http.MethodGet, "/v1/teams/me", nil, nil, &out)
	return out, err
}

// SetAdmission replaces a team's admission flags (admin key).
func (c *Client) SetAdmission(ctx context.Context, teamID string, a api.Admission) (api.Team, error) {
	var out api.Team
	err := c.do(ctx, http.MethodPatch, "/v1/teams/"+url.PathEscape(teamID), nil, api.UpdateTeamRequest{Admission: &a}, &out)
	return out, err
}

// Templates lists the templates the key's team may use, with their state.
func (c *Client) Templates(ctx context.Context) ([]api.Template, error) {
	var out api.List[api.Template]
	err := c.do(ctx, http.MethodGet, "/v1/templates", nil, nil, &out)
	return out.Items, err
}
