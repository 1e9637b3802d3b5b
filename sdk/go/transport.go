package cove

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/cove-dev/cove/api"
)

// DefaultURL is the server NewClient talks to when neither WithBaseURL nor
// COVE_URL says otherwise: `cove serve`'s default address.
const DefaultURL = "http://127.0.0.1:7070"

// Client talks to one cove server with one API key. It is safe for
// concurrent use.
type Client struct {
	base      string
	key       string
	http      *http.Client
	userAgent string
	// timeout bounds each call that answers at once (not the streams,
	// which last as long as what they follow); zero is no bound.
	timeout time.Duration
	retry   RetryPolicy
	// sleep waits between attempts; tests make it record instead.
	sleep func(ctx context.Context, d time.Duration) error
}

// RetryPolicy bounds the retries of one call: at most Attempts attempts in
// all, and no wait that would end after MaxElapsed from the first.
// Waits grow from Base, doubling up to Max, with full jitter; a
// Retry-After from the server is waited out instead.
type RetryPolicy struct {
	Attempts   int
	Base, Max  time.Duration
	MaxElapsed time.Duration
}

// DefaultRetry is the retry policy of a new client: four attempts within
// thirty seconds.
var DefaultRetry = RetryPolicy{Attempts: 4, Base: 250 * time.Millisecond, Max: 5 * time.Second, MaxElapsed: 30 * time.Second}

// Option configures a Client made by NewClient.
type Option func(*Client)

// WithBaseURL sets the server's URL (e.g. http://127.0.0.1:7070), instead
// of COVE_URL.
func WithBaseURL(u string) Option { return func(c *Client) { c.base = strings.TrimRight(u, "/") } }

// WithAPIKey sets the API key, instead of COVE_API_KEY.
func WithAPIKey(key string) Option { return func(c *Client) { c.key = key } }

// WithHTTPClient makes the client send its requests with h (its
// transport, proxy and TLS settings). h's own Timeout bounds streams too;
// prefer WithTimeout.
func WithHTTPClient(h *http.Client) Option { return func(c *Client) { c.http = h } }

// WithUserAgent sets the User-Agent of every request, e.g. "my-agent/1.2".
func WithUserAgent(ua string) Option { return func(c *Client) { c.userAgent = ua } }

// WithTimeout bounds each call that answers at once, retries included
// (a minute by default). Streams (Output and FollowEvents, downloads and
// uploads), calls that wait for a state (WaitSandbox, ExecWait, a create
// with wait) and calls whose work grows with the data (SaveAsset, a
// recursive RemoveFile) are bounded by their context only. Zero means no
// bound; a call's ctx deadline applies as well.
func WithTimeout(d time.Duration) Option { return func(c *Client) { c.timeout = d } }

// WithRetry sets the retry policy; RetryPolicy{Attempts: 1} turns retries
// off.
func WithRetry(p RetryPolicy) Option { return func(c *Client) { c.retry = p } }

// NewClient returns a client configured by opts. The server's URL and the
// API key default to the environment's COVE_URL (else DefaultURL) and
// COVE_API_KEY. Calls retry by DefaultRetry and time out after a minute.
func NewClient(opts ...Option) *Client {
	c := &Client{
		base:      strings.TrimRight(os.Getenv("COVE_URL"), "/"),
		key:       os.Getenv("COVE_API_KEY"),
		http:      &http.Client{},
		userAgent: "cove-go",
		timeout:   time.Minute,
		retry:     DefaultRetry,
		sleep:     sleepCtx,
	}
	if c.base == "" {
		c.base = DefaultURL
	}
	for _, o := range opts {
		o(c)
	}
	if c.retry.Attempts < 1 {
		c.retry.Attempts = 1
	}
	return c
}

// New returns a client for the server at baseURL with apiKey, otherwise
// as NewClient. It reads no environment.
func New(baseURL, apiKey string) *Client {
	return NewClient(WithBaseURL(baseURL), WithAPIKey(apiKey))
}

// BaseURL is the server URL the client talks to.
func (c *Client) BaseURL() string { return c.base }

// Error is every failure of a call: an answer in the API's error format
// (Code, Message, Details, Status), another non-2xx answer (a code
// inferred from Status), or no answer at all (Code unavailable, Status
// 0, Err the transport's error). It unwraps to an *api.Error with the same
// code, so api.ErrorCode works on it, and to Err.
type Error struct {
	Code    api.Code
	Message string
	Details map[string]any
	// Status is the HTTP status of the answer; 0 when none came.
	Status int
	// RequestID names the request: the server's X-Request-Id when it sent
	// one, else the one the SDK sent.
	RequestID string
	// RetryAfter is what the server's Retry-After asked for, if anything.
	RetryAfter time.Duration
	// Err is the transport's error when no answer came.
	Err error
}

// Error says the code, the message, the status (or that no answer came)
// and the request ID.
func (e *Error) Error() string {
	s := string(e.Code) + ": " + e.Message
	if e.Status != 0 {
		s += fmt.Sprintf(" (HTTP %d", e.Status)
	} else {
		s += " (no answer"
	}
	if e.RequestID != "" {
		s += ", request " + e.RequestID
	}
	return s + ")"
}

// Unwrap gives the API's error with the same code, and the transport's
// error (context.Canceled, a *net.OpError, …) when there is one.
func (e *Error) Unwrap() []error {
	out := []error{&api.Error{Code: e.Code, Message: e.Message, Details: e.Details}}
	if e.Err != nil {
		out = append(out, e.Err)
	}
	return out
}

// IdempotencyKey is the request header that makes a mutating call safe to
// retry: the server answers a repeated key with the first answer.
const IdempotencyKey = "Idempotency-Key"

type keyCtx struct{}

// WithIdempotencyKey makes the calls made with ctx send key as their
// Idempotency-Key instead of a fresh one, e.g. to retry a create across
// process restarts without making two sandboxes. Use one key per logical
// operation.
func WithIdempotencyKey(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, keyCtx{}, key)
}

// takesKey reports whether the API honours an Idempotency-Key on a call:
// every call that changes something does, but those whose answer holds a
// credential shown once (teams, keys, tickets, join tokens, private
// previews, which refuse one) and stdin (which appends).
func takesKey(method, path string, privatePreview bool) bool {
	switch method {
	case http.MethodGet, http.MethodHead:
		return false
	}
	switch {
	case path == "/v1/teams" && method == http.MethodPost,
		strings.HasPrefix(path, "/v1/teams/") && strings.HasSuffix(path, "/keys"),
		path == "/v1/tickets",
		path == "/v1/nodes/join-token",
		strings.HasSuffix(path, "/stdin"),
		method == http.MethodPut && strings.HasPrefix(path, "/v1/secrets/"):
		return false
	case strings.HasSuffix(path, "/previews") && method == http.MethodPost:
		return !privatePreview
	}
	return true
}

// idempotentMethod reports whether HTTP says repeating the method does no
// more than doing it once.
func idempotentMethod(m string) bool {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPut, http.MethodDelete, http.MethodOptions:
		return true
	}
	return false
}

// roundTrip sends req with the client's headers, an Idempotency-Key where
// the API takes one (keyed says so), and retries as the policy allows; it
// returns a 2xx answer, any other outcome as *Error. A request whose body
// cannot be read again (no GetBody) is sent once.
func (c *Client) roundTrip(req *http.Request, keyed bool) (*http.Response, error) {
	ctx := req.Context()
	rid := newID()
	req.Header.Set("Authorization", "Bearer "+c.key)
	req.Header.Set("X-Request-Id", rid)
	if c.userAgent != "" {
		req.Header.Set("User-Agent", c.userAgent)
	}
	if keyed && req.Header.Get(IdempotencyKey) == "" {
		key, _ := ctx.Value(keyCtx{}).(string)
		if key == "" {
			key = newID()
		}
		req.Header.Set(IdempotencyKey, key)
	}
	retryable := (idempotentMethod(req.Method) || req.Header.Get(IdempotencyKey) != "") &&
		(req.Body == nil || req.Body == http.NoBody || req.GetBody != nil)
	start := time.Now()
	for attempt := 1; ; attempt++ {
		if attempt > 1 && req.GetBody != nil {
			body, err := req.GetBody()
			if err != nil {
				return nil, &Error{Code: api.CodeInternal, Message: "rewind the request body: " + err.Error(), RequestID: rid, Err: err}
			}
			req.Body = body
		}
		resp, err := c.http.Do(req)
		var cerr *Error
		if err != nil {
			if ctx.Err() != nil {
				return nil, &Error{Code: api.CodeUnavailable, Message: req.Method + " " + req.URL.Path + ": " + context.Cause(ctx).Error(), RequestID: rid, Err: context.Cause(ctx)}
			}
			cerr = &Error{Code: api.CodeUnavailable, Message: req.Method + " " + req.URL.Path + ": " + err.Error(), RequestID: rid, Err: err}
		} else {
			if resp.StatusCode/100 == 2 {
				return resp, nil
			}
			cerr = decodeError(resp, rid)
			resp.Body.Close()
		}
		if !retryable || attempt >= c.retry.Attempts || !retryOn(cerr) {
			return nil, cerr
		}
		wait := c.backoff(attempt, cerr.RetryAfter)
		if c.retry.MaxElapsed > 0 && time.Since(start)+wait > c.retry.MaxElapsed {
			return nil, cerr
		}
		if err := c.sleep(ctx, wait); err != nil {
			return nil, cerr
		}
	}
}

// retryOn reports whether a failed attempt may succeed if repeated: no
// answer, too many requests, unavailable, or a conflict that says when to
// come back (an idempotent attempt still running).
func retryOn(e *Error) bool {
	switch e.Status {
	case 0, http.StatusTooManyRequests, http.StatusServiceUnavailable:
		return true
	case http.StatusConflict:
		return e.RetryAfter > 0
	}
	return false
}

// backoff is the wait before attempt+1: the server's Retry-After when it
// sent one, else an exponential wait with full jitter.
func (c *Client) backoff(attempt int, retryAfter time.Duration) time.Duration {
	if retryAfter > 0 {
		return retryAfter
	}
	d := c.retry.Base << (attempt - 1)
	if d <= 0 || (c.retry.Max > 0 && d > c.retry.Max) {
		d = c.retry.Max
	}
	if d <= 0 {
		return 0
	}
	return rand.N(d) + d/10
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// newID is a random identifier for a request or an Idempotency-Key.
func newID() string {
	var b [16]byte
	crand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// decodeError turns a non-2xx answer into an *Error.
func decodeError(resp *http.Response, rid string) *Error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	e := &Error{Status: resp.StatusCode, RequestID: rid}
	if id := resp.Header.Get("X-Request-Id"); id != "" {
		e.RequestID = id
	}
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s >= 0 {
		e.RetryAfter = time.Duration(s) * time.Second
	}
	var er api.ErrorResponse
	if err := json.Unmarshal(b, &er); err == nil && er.Error != nil && er.Error.Code != "" {
		e.Code, e.Message, e.Details = er.Error.Code, er.Error.Message, er.Error.Details
		return e
	}
	e.Code = codeForStatus(resp.StatusCode)
	if e.Message = strings.TrimSpace(string(b)); e.Message == "" {
		e.Message = resp.Status
	}
	return e
}

// errorAs is errors.As for *Error.
func errorAs(err error) (*Error, bool) {
	var e *Error
	ok := errors.As(err, &e)
	return e, ok
}
