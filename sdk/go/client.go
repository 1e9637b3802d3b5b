// Package cove is the Go client of cove's REST API. The CLI is built on it.
// Every method returns *api.Error for answers in the API's error format, so
// callers branch on api.ErrorCode(err).
package cove

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	fastbase64 "github.com/segmentio/asm/base64"

	"github.com/cove-dev/cove/api"
)

// do makes a call that answers at once, bounded by the client's timeout,
// and decodes its JSON answer into out (unless nil).
func (c *Client) do(ctx context.Context, method, path string, query url.Values, in, out any) error {
	// A call that waits for a state (?wait=) lasts as long as it asked
	// to; one whose work grows with the data is bounded by ctx alone.
	if _, long := ctx.Value(longCall{}).(bool); c.timeout > 0 && !query.Has("wait") && !long {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
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
		return &Error{Code: api.CodeUnavailable, Message: fmt.Sprintf("decode answer of %s %s: %v", method, path, err), Status: resp.StatusCode, Err: err}
	}
	return nil
}

// longCall marks a call's ctx: its work grows with the data (a folder
// saved as an asset, a tree removed), so the client's timeout does not
// bound it.
type longCall struct{}

func long(ctx context.Context) context.Context { return context.WithValue(ctx, longCall{}, true) }

// send makes a request and returns a 2xx answer; any other answer becomes
// an *Error. A JSON body (in, not an io.Reader) can be sent again, so the
// call retries as roundTrip allows.
func (c *Client) send(ctx context.Context, method, path string, query url.Values, in any) (*http.Response, error) {
	var body io.Reader
	ct := ""
	private := false
	switch v := in.(type) {
	case nil:
	case io.Reader:
		body, ct = v, "application/octet-stream"
	default:
		b, err := json.Marshal(v)
		if err != nil {
			return nil, &Error{Code: api.CodeInvalidArgument, Message: "encode request: " + err.Error(), Err: err}
		}
		body, ct = bytes.NewReader(b), "application/json"
		if p, ok := v.(api.CreatePreviewRequest); ok {
			private = p.Visibility != api.VisibilityPublic
		}
	}
	req, err := c.newRequest(ctx, method, path, query, body)
	if err != nil {
		return nil, err
	}
	if ct != "" {
		req.Header.Set("Content-Type", ct)
	}
	return c.roundTrip(req, takesKey(method, path, private))
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
	// Store is "ok" when the replica that answered reaches its store, or
	// else the error it got; Leader says whether that replica leads (runs
	// the control plane's singletons). Neither makes the answer fail.
	Store  string `json:"store,omitempty"`
	Leader bool   `json:"leader"`
}

// Health reports whether the server serves, and the state of its warm pool.
func (c *Client) Health(ctx context.Context) (Health, error) {
	var h Health
	err := c.do(ctx, http.MethodGet, "/healthz", nil, nil, &h)
	return h, err
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

// ExecOption adjusts how a command is started.
type ExecOption func(*execOptions)

type execOptions struct {
	noWake bool
}

// ExecNoWake makes a command sent to an asleep (or sleeping, or waking)
// sandbox fail with a conflict (409) instead of waking it first.
func ExecNoWake() ExecOption { return func(o *execOptions) { o.noWake = true } }

func execQuery(wait bool, opts []ExecOption) url.Values {
	var o execOptions
	for _, f := range opts {
		f(&o)
	}
	q := url.Values{}
	if wait {
		q.Set("wait", "true")
	}
	if o.noWake {
		q.Set("wake", "false")
	}
	return q
}

// Exec starts a command and returns at once. An asleep sandbox is woken
// first, and one sleeping or waking waited for (see ExecNoWake).
func (c *Client) Exec(ctx context.Context, ref string, req api.CreateCommandRequest, opts ...ExecOption) (api.Command, error) {
	var cmd api.Command
	err := c.do(ctx, http.MethodPost, sandboxPath(ref)+"/commands", execQuery(false, opts), req, &cmd)
	return cmd, err
}

// ExecWait runs a command to its end and returns its output. An asleep
// sandbox is woken first, as by Exec.
func (c *Client) ExecWait(ctx context.Context, ref string, req api.CreateCommandRequest, opts ...ExecOption) (api.CommandResult, error) {
	var res api.CommandResult
	err := c.do(ctx, http.MethodPost, sandboxPath(ref)+"/commands", execQuery(true, opts), req, &res)
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

// ErrStreamEnded says an output stream kept ending before the exit record
// while following, after every reconnection the retry policy allows.
var ErrStreamEnded = errors.New("output stream ended before the command's exit")

// Output reads a command's recorded output after seq `after`, calling fn
// for each record in order (the last one, when the command has ended, has
// Type "exit"). With follow it goes on until the exit: a connection cut
// on the way is reopened after the last sequence number seen, so fn sees
// each record once, in order. It gives up (returning the cut's *Error)
// after the retry policy's attempts without progress.
func (c *Client) Output(ctx context.Context, ref, id string, after int64, follow bool, fn func(api.OutputRecord) error) error {
	return c.readOutput(ctx, commandPath(ref, id)+"/output", after, follow, fn)
}

// readOutput reads an NDJSON output stream (a command's or a workload's),
// resuming after a cut when following.
func (c *Client) readOutput(ctx context.Context, path string, after int64, follow bool, fn func(api.OutputRecord) error) error {
	failures := 0
	for {
		done, progressed, err := c.readOutputOnce(ctx, path, &after, follow, fn)
		if done || err == nil && !follow {
			return err
		}
		if err == nil {
			// The server ended the stream before the exit: resumed while
			// it still brings records, since a proxy may end a long
			// stream; a stream that ends again with nothing new has
			// ended (a cancelled workload's output has no exit).
			err = &Error{Code: api.CodeUnavailable, Message: ErrStreamEnded.Error(), Err: ErrStreamEnded}
			if !progressed {
				return err
			}
		}
		var ce *Error
		if !errors.As(err, &ce) || !retryOn(ce) || ctx.Err() != nil {
			return err
		}
		if !c.resumeAfter(ctx, &failures, progressed, ce) {
			return err
		}
	}
}

// resumeAfter counts a failed connection of a resumed stream (the count
// starts again after one that made progress) and waits its backoff; false
// when the stream gives up: the retry policy's attempts are spent, or ctx
// ended while waiting.
func (c *Client) resumeAfter(ctx context.Context, failures *int, progressed bool, ce *Error) bool {
	if progressed {
		*failures = 0
	}
	if *failures++; *failures >= c.retry.Attempts {
		return false
	}
	return c.sleep(ctx, c.backoff(*failures, ce.RetryAfter)) == nil
}

// readOutputOnce reads one connection of an output stream, advancing
// *after; done is true once the exit record was seen or fn failed.
func (c *Client) readOutputOnce(ctx context.Context, path string, after *int64, follow bool, fn func(api.OutputRecord) error) (done, progressed bool, err error) {
	q := url.Values{"after": {strconv.FormatInt(*after, 10)}}
	if follow {
		q.Set("follow", "true")
	}
	resp, err := c.send(ctx, http.MethodGet, path, q, nil)
	if err != nil {
		return false, false, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 256<<10), 1<<20)
	for sc.Scan() {
		rec, err := decodeOutputRecord(sc.Bytes())
		if err != nil {
			return true, progressed, fmt.Errorf("decode output record: %w", err)
		}
		if err := fn(rec); err != nil {
			return true, progressed, err
		}
		progressed = true
		if rec.Seq > *after {
			*after = rec.Seq
		}
		if rec.Type == "exit" {
			return true, true, nil
		}
	}
	if err := sc.Err(); err != nil {
		if ctx.Err() != nil {
			return true, progressed, &Error{Code: api.CodeUnavailable, Message: "read output: " + context.Cause(ctx).Error(), Err: context.Cause(ctx)}
		}
		return false, progressed, &Error{Code: api.CodeUnavailable, Message: "read output: " + err.Error(), Err: err}
	}
	return !follow, progressed, nil
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
				data := make([]byte, fastbase64.StdEncoding.DecodedLen(len(b64)))
				if n, err := fastbase64.StdEncoding.Decode(data, b64); err == nil {
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
// q.After, calling fn for each in order, until ctx is done or fn fails. A
// cut connection is reopened with Last-Event-ID set to the last event
// seen, so fn sees each event once; it gives up after the retry policy's
// attempts without an event.
func (c *Client) FollowEvents(ctx context.Context, q EventQuery, fn func(api.Event) error) error {
	failures := 0
	for {
		progressed, err := c.followEventsOnce(ctx, &q, fn)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var ce *Error
		if err != nil && (!errors.As(err, &ce) || !retryOn(ce)) {
			return err
		}
		if err == nil {
			ce = &Error{Code: api.CodeUnavailable, Message: "event stream ended"}
			err = ce
		}
		if !c.resumeAfter(ctx, &failures, progressed, ce) {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
	}
}

// followEventsOnce reads one connection of the event stream, moving
// q.After past each event fn took.
func (c *Client) followEventsOnce(ctx context.Context, q *EventQuery, fn func(api.Event) error) (progressed bool, err error) {
	req, err := c.newRequest(ctx, http.MethodGet, "/v1/events/stream", q.values(), nil)
	if err != nil {
		return false, err
	}
	req.Header.Set("Accept", "text/event-stream")
	if q.After != "" {
		req.Header.Set("Last-Event-ID", q.After)
	}
	resp, err := c.roundTrip(req, false)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	err = readSSE(resp.Body, func(ev sseEvent) error {
		if ev.data == "" {
			return nil
		}
		var e api.Event
		if err := json.Unmarshal([]byte(ev.data), &e); err != nil {
			return fmt.Errorf("decode event: %w", err)
		}
		if err := fn(e); err != nil {
			return err
		}
		progressed = true
		switch {
		case ev.id != "":
			q.After = ev.id
		case e.ID != "":
			q.After = e.ID
		}
		return nil
	})
	if err != nil && errors.Is(err, errSSERead) {
		return progressed, &Error{Code: api.CodeUnavailable, Message: err.Error(), Err: err}
	}
	return progressed, err
}

// sseEvent is one server-sent event: its id and its data lines joined by
// newlines.
type sseEvent struct {
	id, event, data string
}

var errSSERead = errors.New("read event stream")

// readSSE parses a text/event-stream as the HTML standard says: fields
// until a blank line make an event, several data lines join with "\n",
// lines starting with ':' are comments, one space after the colon is
// dropped. An error reading r wraps errSSERead; fn's error is returned
// as is.
func readSSE(r io.Reader, fn func(sseEvent) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var (
		ev      sseEvent
		data    []string
		hasData bool
	)
	for sc.Scan() {
		line := strings.TrimSuffix(sc.Text(), "\r")
		if line == "" {
			if hasData {
				ev.data = strings.Join(data, "\n")
				if err := fn(ev); err != nil {
					return err
				}
			}
			ev, data, hasData = sseEvent{}, data[:0], false
			continue
		}
		if strings.HasPrefix(line, ":") {
			continue
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "data":
			data, hasData = append(data, value), true
		case "id":
			ev.id = value
		case "event":
			ev.event = value
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("%w: %w", errSSERead, err)
	}
	return nil
}
