package cove

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"github.com/cove-dev/cove/api"
)

func snapshotPath(ref string) string { return "/v1/snapshots/" + url.PathEscape(ref) }

// CreateSnapshot freezes a running or asleep sandbox's files as a
// snapshot of the team named name; the sandbox's commands go on.
func (c *Client) CreateSnapshot(ctx context.Context, ref, name string) (api.Snapshot, error) {
	var s api.Snapshot
	err := c.do(ctx, http.MethodPost, sandboxPath(ref)+"/snapshots", nil, api.CreateSnapshotRequest{Name: name}, &s)
	return s, err
}

// GetSnapshot returns a snapshot by ID or name.
func (c *Client) GetSnapshot(ctx context.Context, ref string) (api.Snapshot, error) {
	var s api.Snapshot
	err := c.do(ctx, http.MethodGet, snapshotPath(ref), nil, nil, &s)
	return s, err
}

// ListSnapshots lists a page of the team's snapshots, of one sandbox when
// sandbox is set.
func (c *Client) ListSnapshots(ctx context.Context, sandbox string, limit int, cursor string) (api.List[api.Snapshot], error) {
	q := url.Values{}
	if sandbox != "" {
		q.Set("sandbox", sandbox)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	var l api.List[api.Snapshot]
	err := c.do(ctx, http.MethodGet, "/v1/snapshots", q, nil, &l)
	return l, err
}

// DeleteSnapshot deletes a snapshot; one that sandboxes still stand on
// answers 409 naming them.
func (c *Client) DeleteSnapshot(ctx context.Context, ref string) error {
	return c.do(ctx, http.MethodDelete, snapshotPath(ref), nil, nil, nil)
}

// RestoreSandbox returns a running or asleep sandbox to a snapshot: its
// running commands end, its ID, name, network and history stay. With
// wait, it answers once the sandbox runs again.
func (c *Client) RestoreSandbox(ctx context.Context, ref, snapshot string, wait bool) (api.Sandbox, error) {
	q := url.Values{}
	if wait {
		q.Set("wait", string(api.StateRunning))
	}
	var sb api.Sandbox
	err := c.do(ctx, http.MethodPost, sandboxPath(ref)+"/restore", q, api.RestoreSandboxRequest{SnapshotID: snapshot}, &sb)
	return sb, err
}

// ForkSandbox makes req.Count new sandboxes from a sandbox's files as
// they are now. With wait, it answers once they all run.
func (c *Client) ForkSandbox(ctx context.Context, ref string, req api.ForkSandboxRequest, wait bool) ([]api.Sandbox, error) {
	q := url.Values{}
	if wait {
		q.Set("wait", string(api.StateRunning))
	}
	out := api.ForkResult{}
	err := c.do(ctx, http.MethodPost, sandboxPath(ref)+"/fork", q, req, &out)
	return out.Items, err
}
