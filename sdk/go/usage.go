package cove

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/cove-dev/cove/api"
)

// MetricsQuery selects a sandbox's samples; zero fields take the server's
// defaults (the last hour, a step of at most 1000 points).
type MetricsQuery struct {
	From, To time.Time
	Step     time.Duration
}

// Metrics returns a sandbox's resource samples and the gaps in them.
func (c *Client) Metrics(ctx context.Context, ref string, q MetricsQuery) (api.Metrics, error) {
	v := url.Values{}
	if !q.From.IsZero() {
		v.Set("from", q.From.UTC().Format(time.RFC3339Nano))
	}
	if !q.To.IsZero() {
		v.Set("to", q.To.UTC().Format(time.RFC3339Nano))
	}
	if q.Step > 0 {
		v.Set("step", strconv.FormatInt(int64(q.Step/time.Second), 10))
	}
	var m api.Metrics
	err := c.do(ctx, http.MethodGet, sandboxPath(ref)+"/metrics", v, nil, &m)
	return m, err
}

// SandboxUsage returns what a sandbox used and cost.
func (c *Client) SandboxUsage(ctx context.Context, ref string) (api.SandboxUsage, error) {
	var u api.SandboxUsage
	err := c.do(ctx, http.MethodGet, sandboxPath(ref)+"/usage", nil, nil, &u)
	return u, err
}

// UsageQuery selects a team's usage report; GroupBy is "day", "sandbox"
// or "" (the total only).
type UsageQuery struct {
	From, To time.Time
	GroupBy  string
}

// Usage returns the team's usage and cost.
func (c *Client) Usage(ctx context.Context, q UsageQuery) (api.UsageReport, error) {
	v := url.Values{}
	if !q.From.IsZero() {
		v.Set("from", q.From.UTC().Format(time.RFC3339Nano))
	}
	if !q.To.IsZero() {
		v.Set("to", q.To.UTC().Format(time.RFC3339Nano))
	}
	if q.GroupBy != "" {
		v.Set("group_by", q.GroupBy)
	}
	var r api.UsageReport
	err := c.do(ctx, http.MethodGet, "/v1/usage", v, nil, &r)
	return r, err
}

// UpdateTeam changes a team's admission and monthly spend limit (admin).
func (c *Client) UpdateTeam(ctx context.Context, teamID string, req api.UpdateTeamRequest) (api.Team, error) {
	var t api.Team
	err := c.do(ctx, http.MethodPatch, "/v1/teams/"+url.PathEscape(teamID), nil, req, &t)
	return t, err
}
