package cove

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/cove-dev/cove/api"
)

func workloadPath(id string) string { return "/v1/workloads/" + url.PathEscape(id) }

// SubmitWorkload submits a batch run; it is queued until a node can place
// it.
func (c *Client) SubmitWorkload(ctx context.Context, req api.CreateWorkloadRequest) (api.Workload, error) {
	var w api.Workload
	err := c.do(ctx, http.MethodPost, "/v1/workloads", nil, req, &w)
	return w, err
}

// GetWorkload returns a workload.
func (c *Client) GetWorkload(ctx context.Context, id string) (api.Workload, error) {
	var w api.Workload
	err := c.do(ctx, http.MethodGet, workloadPath(id), nil, nil, &w)
	return w, err
}

// WaitWorkload long-polls until the workload is in state (or has ended)
// or timeout passes.
func (c *Client) WaitWorkload(ctx context.Context, id string, state api.WorkloadState, timeout time.Duration) (api.Workload, error) {
	q := url.Values{"wait": {string(state)}, "timeout_s": {strconv.Itoa(int(timeout.Seconds()))}}
	var w api.Workload
	err := c.do(ctx, http.MethodGet, workloadPath(id), q, nil, &w)
	return w, err
}

// ListWorkloads returns one page of the team's workloads, oldest first;
// states, when given, filter them.
func (c *Client) ListWorkloads(ctx context.Context, limit int, cursor string, states ...api.WorkloadState) (api.List[api.Workload], error) {
	v := url.Values{}
	for _, s := range states {
		v.Add("state", string(s))
	}
	if limit > 0 {
		v.Set("limit", strconv.Itoa(limit))
	}
	if cursor != "" {
		v.Set("cursor", cursor)
	}
	var out api.List[api.Workload]
	err := c.do(ctx, http.MethodGet, "/v1/workloads", v, nil, &out)
	return out, err
}

// CancelWorkload cancels a queued or running workload.
func (c *Client) CancelWorkload(ctx context.Context, id string) (api.Workload, error) {
	var w api.Workload
	err := c.do(ctx, http.MethodPost, workloadPath(id)+"/cancel", nil, nil, &w)
	return w, err
}

// WorkloadOutput reads a workload's recorded output as Output reads a
// command's.
func (c *Client) WorkloadOutput(ctx context.Context, id string, after int64, follow bool, fn func(api.OutputRecord) error) error {
	return c.readOutput(ctx, workloadPath(id)+"/output", after, follow, fn)
}

// WorkloadStdout copies a workload's recorded stdout, raw, to w.
func (c *Client) WorkloadStdout(ctx context.Context, id string, w io.Writer) (int64, error) {
	return c.copyRaw(ctx, workloadPath(id)+"/stdout", "stdout", w)
}

// WorkloadStderr copies a workload's recorded stderr, raw, to w.
func (c *Client) WorkloadStderr(ctx context.Context, id string, w io.Writer) (int64, error) {
	return c.copyRaw(ctx, workloadPath(id)+"/stderr", "stderr", w)
}

func (c *Client) copyRaw(ctx context.Context, path, name string, w io.Writer) (int64, error) {
	resp, err := c.send(ctx, http.MethodGet, path, nil, nil)
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
