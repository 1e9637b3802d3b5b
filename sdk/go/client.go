// Package cove is the Go client of cove's REST API. The CLI is built on it.
// Every method returns *api.Error for answers in the API's error format, so
// callers branch on api.ErrorCode(err).
package cove

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/cove-dev/cove/api"
)

// Client talks to one cove server with one API key.
type Client struct {
	base string
	key  string
	http *http.Client
}

// New returns a client for the server at baseURL (e.g. http://127.0.0.1:7070).
func New(baseURL, apiKey string) *Client {
	return &Client{base: strings.TrimRight(baseURL, "/"), key: apiKey, http: &http.Client{}}
}

// BaseURL is the server URL the client talks to.
func (c *Client) BaseURL() string { return c.base }

func (c *Client) do(ctx context.Context, method, path string, query url.Values, in, out any) error {
	resp, err := c.send(ctx, method, path, query, in)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		io.Copy(io.Discard, resp.Body)
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("decode answer of %s %s: %w", method, path, err)
	}
	return nil
}

// send makes a request and returns a 2xx answer; any other answer becomes
// an error.
func (c *Client) send(ctx context.Context, method, path string, query url.Values, in any) (*http.Response, error) {
	var body io.Reader
	ct := ""
	switch v := in.(type) {
	case nil:
	case io.Reader:
		body, ct = v, "application/octet-stream"
	default:
		b, err := json.Marshal(v)
		if err != nil {
			return nil, err
		}
		body, ct = bytes.NewReader(b), "application/json"
	}
	u := c.base + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, err
	}
	if ct != "" {
		req.Header.Set("Content-Type", ct)
	}
	req.Header.Set("Authorization", "Bearer "+c.key)
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return resp, nil
	}
	defer resp.Body.Close()
	return nil, decodeError(resp)
}

func decodeError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var er api.ErrorResponse
	if err := json.Unmarshal(b, &er); err == nil && er.Error != nil && er.Error.Code != "" {
		return er.Error
	}
	msg := strings.TrimSpace(string(b))
	if msg == "" {
		msg = resp.Status
	}
	return &api.Error{Code: codeForStatus(resp.StatusCode), Message: msg}
}

func codeForStatus(status int) api.Code {
	switch status {
	case http.StatusBadRequest:
		return api.CodeInvalidArgument
	case http.StatusUnauthorized:
		return api.CodeUnauthenticated
	case http.StatusForbidden:
		return api.CodePermissionDenied
	case http.StatusNotFound:
		return api.CodeNotFound
	case http.StatusConflict, http.StatusMethodNotAllowed:
		return api.CodeConflict
	case http.StatusPreconditionFailed:
		return api.CodePreconditionFailed
	case http.StatusRequestEntityTooLarge:
		return api.CodePayloadTooLarge
	case http.StatusUnprocessableEntity:
		return api.CodeUnprocessable
	case http.StatusTooManyRequests:
		return api.CodeResourceExhausted
	case http.StatusPaymentRequired:
		return api.CodeBudgetExceeded
	case http.StatusInsufficientStorage:
		return api.CodeInsufficientStorage
	case http.StatusServiceUnavailable, http.StatusBadGateway, http.StatusGatewayTimeout:
		return api.CodeUnavailable
	}
	return api.CodeInternal
}

// Health is what GET /healthz answers.
type Health struct {
	Status   string `json:"status"`
	WarmPool struct {
		Ready  int `json:"ready"`
		Target int `json:"target"`
	} `json:"warm_pool"`
	// Listeners are the addresses the server bound, by name ("api",
	// "gateway", "dns").
	Listeners map[string]string `json:"listeners,omitempty"`
	// GPUs are the node's GPUs, for workloads.
	GPUs *api.GPUHealth `json:"gpus,omitempty"`
}

// Health reports whether the server serves, and the state of its warm pool.
func (c *Client) Health(ctx context.Context) (Health, error) {
	var h Health
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/healthz", nil)
	if err != nil {
		return h, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return h, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return h, fmt.Errorf("healthz answered %s", resp.Status)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&h); err != nil {
		return h, fmt.Errorf("healthz: %w", err)
	}
	return h, nil
}

func sandboxPath(ref string) string { return "/v1/sandboxes/" + url.PathEscape(ref) }

func commandPath(ref, id string) string {
	return sandboxPath(ref) + "/commands/" + url.PathEscape(id)
}

// CreateSandbox creates a sandbox; with wait it returns once it runs (or
// failed).
func (c *Client) CreateSandbox(ctx context.Context, req api.CreateSandboxRequest, wait bool) (api.Sandbox, error) {
	q := url.Values{}
	if wait {
		q.Set("wait", string(api.StateRunning))
	}
	var sb api.Sandbox
	err := c.do(ctx, http.MethodPost, "/v1/sandboxes", q, req, &sb)
	return sb, err
}

// GetSandbox returns a sandbox by ID or name.
func (c *Client) GetSandbox(ctx context.Context, ref string) (api.Sandbox, error) {
	var sb api.Sandbox
	err := c.do(ctx, http.MethodGet, sandboxPath(ref), nil, nil, &sb)
	return sb, err
}

// WaitSandbox long-polls until the sandbox is in state (or a terminal one)
// or timeout passes.
func (c *Client) WaitSandbox(ctx context.Context, ref string, state api.SandboxState, timeout time.Duration) (api.Sandbox, error) {
	q := url.Values{"wait": {string(state)}, "timeout_s": {strconv.Itoa(int(timeout.Seconds()))}}
	var sb api.Sandbox
	err := c.do(ctx, http.MethodGet, sandboxPath(ref), q, nil, &sb)
	return sb, err
}

// SandboxQuery filters ListSandboxes.
type SandboxQuery struct {
	States []api.SandboxState
	Labels map[string]string
	Limit  int
	Cursor string
}

// ListSandboxes returns one page of sandboxes.
func (c *Client) ListSandboxes(ctx context.Context, q SandboxQuery) (api.List[api.Sandbox], error) {
	v := url.Values{}
	for _, s := range q.States {
		v.Add("state", string(s))
	}
	for k, val := range q.Labels {
		v.Add("label", k+"="+val)
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	if q.Cursor != "" {
		v.Set("cursor", q.Cursor)
	}
	var out api.List[api.Sandbox]
	err := c.do(ctx, http.MethodGet, "/v1/sandboxes", v, nil, &out)
	return out, err
}

// TerminateSandbox starts terminating a sandbox.
func (c *Client) TerminateSandbox(ctx context.Context, ref string) (api.Sandbox, error) {
	var sb api.Sandbox
	err := c.do(ctx, http.MethodDelete, sandboxPath(ref), nil, nil, &sb)
	return sb, err
}

// Exec starts a command and returns at once.
func (c *Client) Exec(ctx context.Context, ref string, req api.CreateCommandRequest) (api.Command, error) {
	var cmd api.Command
	err := c.do(ctx, http.MethodPost, sandboxPath(ref)+"/commands", nil, req, &cmd)
	return cmd, err
}

// ExecWait runs a command to its end and returns its output.
func (c *Client) ExecWait(ctx context.Context, ref string, req api.CreateCommandRequest) (api.CommandResult, error) {
	var res api.CommandResult
	err := c.do(ctx, http.MethodPost, sandboxPath(ref)+"/commands", url.Values{"wait": {"true"}}, req, &res)
	return res, err
}

// GetCommand returns a command.
func (c *Client) GetCommand(ctx context.Context, ref, id string) (api.Command, error) {
	var cmd api.Command
	err := c.do(ctx, http.MethodGet, commandPath(ref, id), nil, nil, &cmd)
	return cmd, err
}

// ListCommands returns one page of a sandbox's commands.
func (c *Client) ListCommands(ctx context.Context, ref string, limit int, cursor string) (api.List[api.Command], error) {
	v := url.Values{}
	if limit > 0 {
		v.Set("limit", strconv.Itoa(limit))
	}
	if cursor != "" {
		v.Set("cursor", cursor)
	}
	var out api.List[api.Command]
	err := c.do(ctx, http.MethodGet, sandboxPath(ref)+"/commands", v, nil, &out)
	return out, err
}

// ErrStreamEnded says an output stream ended before the exit record while
// following; resume with the last seen sequence number.
var ErrStreamEnded = errors.New("output stream ended before the command's exit")

// Output reads a command's recorded output after seq `after`, calling fn for
// each record in order (the last one, when the command has ended, has Type
// "exit"). With follow it goes on until the exit.
func (c *Client) Output(ctx context.Context, ref, id string, after int64, follow bool, fn func(api.OutputRecord) error) error {
	return c.readOutput(ctx, commandPath(ref, id)+"/output", after, follow, fn)
}

// readOutput reads an NDJSON output stream (a command's or a workload's).
func (c *Client) readOutput(ctx context.Context, path string, after int64, follow bool, fn func(api.OutputRecord) error) error {
	q := url.Values{"after": {strconv.FormatInt(after, 10)}}
	if follow {
		q.Set("follow", "true")
	}
	resp, err := c.send(ctx, http.MethodGet, path, q, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 256<<10), 1<<20)
	for sc.Scan() {
		rec, err := decodeOutputRecord(sc.Bytes())
		if err != nil {
			return fmt.Errorf("decode output record: %w", err)
		}
		if err := fn(rec); err != nil {
			return err
		}
		if rec.Type == "exit" {
			return nil
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if follow {
		return ErrStreamEnded
	}
	return nil
}

// Stdin appends r to a command's stdin; eof closes it after.
func (c *Client) Stdin(ctx context.Context, ref, id string, r io.Reader, eof bool) error {
	q := url.Values{}
	if eof {
		q.Set("eof", "true")
	}
	if r == nil {
		r = bytes.NewReader(nil)
	}
	return c.do(ctx, http.MethodPost, commandPath(ref, id)+"/stdin", q, r, nil)
}

// Signal sends a signal ("TERM", "KILL", "INT", …) to a command's process
// group.
func (c *Client) Signal(ctx context.Context, ref, id, sig string) error {
	return c.do(ctx, http.MethodPost, commandPath(ref, id)+"/signal", nil, signalRequest{Signal: sig}, nil)
}

// signalRequest is the body of POST …/commands/{id}/signal (schema
// SignalRequest), which the api module has no type for.
type signalRequest struct {
	Signal string `json:"signal"`
}

// CreateTeam creates a team (admin key only); the answer holds its first key.
func (c *Client) CreateTeam(ctx context.Context, name string) (api.CreateTeamResponse, error) {
	var out api.CreateTeamResponse
	err := c.do(ctx, http.MethodPost, "/v1/teams", nil, api.CreateTeamRequest{Name: name}, &out)
	return out, err
}

// CreateKey adds a key to a team; req.Format picks its shape (default
// cove).
func (c *Client) CreateKey(ctx context.Context, teamID string, req api.CreateKeyRequest) (api.KeyResponse, error) {
	var out api.KeyResponse
	err := c.do(ctx, http.MethodPost, "/v1/teams/"+url.PathEscape(teamID)+"/keys", nil, req, &out)
	return out, err
}

// decodeOutputRecord reads one NDJSON line of an output stream. Data
// chunks, which the server writes in one fixed shape, take a fast path
// without reflection; anything else goes through encoding/json.
func decodeOutputRecord(line []byte) (api.OutputRecord, error) {
	const pre, mid, tail = `{"seq":`, `","data":"`, `"}`
	var rec api.OutputRecord
	if rest, ok := bytes.CutPrefix(line, []byte(pre)); ok {
		i := bytes.IndexByte(rest, ',')
		if i > 0 {
			seq, err := strconv.ParseInt(string(rest[:i]), 10, 64)
			rest = rest[i:]
			stream := ""
			for _, s := range []string{"stdout", "stderr"} {
				if r, ok := bytes.CutPrefix(rest, []byte(`,"stream":"`+s+mid)); ok {
					stream, rest = s, r
				}
			}
			if err == nil && stream != "" && bytes.HasSuffix(rest, []byte(tail)) {
				b64 := rest[:len(rest)-len(tail)]
				data := make([]byte, base64.StdEncoding.DecodedLen(len(b64)))
				if n, err := base64.StdEncoding.Decode(data, b64); err == nil {
					return api.OutputRecord{Seq: seq, Stream: stream, Data: data[:n]}, nil
				}
			}
		}
	}
	err := json.Unmarshal(line, &rec)
	return rec, err
}

// SleepSandbox starts putting a sandbox to sleep; WaitSandbox for asleep.
func (c *Client) SleepSandbox(ctx context.Context, ref string) (api.Sandbox, error) {
	var sb api.Sandbox
	err := c.do(ctx, http.MethodPost, sandboxPath(ref)+"/sleep", nil, nil, &sb)
	return sb, err
}

// WakeSandbox starts waking a sandbox; WaitSandbox for running.
func (c *Client) WakeSandbox(ctx context.Context, ref string) (api.Sandbox, error) {
	var sb api.Sandbox
	err := c.do(ctx, http.MethodPost, sandboxPath(ref)+"/wake", nil, nil, &sb)
	return sb, err
}

// UpdateSandbox changes a sandbox's limits, network policy or labels.
func (c *Client) UpdateSandbox(ctx context.Context, ref string, req api.UpdateSandboxRequest) (api.Sandbox, error) {
	var sb api.Sandbox
	err := c.do(ctx, http.MethodPatch, sandboxPath(ref), nil, req, &sb)
	return sb, err
}

// Network returns a sandbox's network policy and observations.
func (c *Client) Network(ctx context.Context, ref string) (api.NetworkView, error) {
	var v api.NetworkView
	err := c.do(ctx, http.MethodGet, sandboxPath(ref)+"/network", nil, nil, &v)
	return v, err
}

// EventQuery filters Events.
type EventQuery struct {
	Sandbox string   // ID or name
	Types   []string // event types
	After   string   // an event ID: only later events
	Limit   int
}

func (q EventQuery) values() url.Values {
	v := url.Values{}
	if q.Sandbox != "" {
		v.Set("sandbox", q.Sandbox)
	}
	for _, t := range q.Types {
		v.Add("type", t)
	}
	if q.After != "" {
		v.Set("after", q.After)
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	return v
}

// Events returns one page of the team's events, oldest first.
func (c *Client) Events(ctx context.Context, q EventQuery) (api.List[api.Event], error) {
	var out api.List[api.Event]
	err := c.do(ctx, http.MethodGet, "/v1/events", q.values(), nil, &out)
	return out, err
}

// FollowEvents streams the team's events (server-sent events) after
// q.After, calling fn for each, until ctx is done or fn fails.
func (c *Client) FollowEvents(ctx context.Context, q EventQuery, fn func(api.Event) error) error {
	resp, err := c.send(ctx, http.MethodGet, "/v1/events/stream", q.values(), nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue // id:, event:, comments and blank lines
		}
		var e api.Event
		if err := json.Unmarshal([]byte(data), &e); err != nil {
			return fmt.Errorf("decode event: %w", err)
		}
		if err := fn(e); err != nil {
			return err
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return sc.Err()
}
