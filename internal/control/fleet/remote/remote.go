// Package remote is the control plane's client of one node's API
// (internal/node/nodeapi): it makes the calls of the control plane's node
// contract over HTTPS with mutual TLS, streams bodies and output, opens
// raw tunnels for previews, and keeps the node's event stream open,
// delivering command exits and network denials.
//
// A node that is unreachable or gone answers unavailable within seconds:
// dials and handshakes time out, and HTTP/2 pings end streams on a
// connection the node stopped answering.
package remote

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/cove-dev/cove/api"
	ids "github.com/cove-dev/cove/internal/id"
	"github.com/cove-dev/cove/internal/netpolicy"
	"github.com/cove-dev/cove/internal/node"
	"github.com/cove-dev/cove/internal/node/nodeapi"
)

// Timeouts of the client.
const (
	// DialTimeout bounds a connection's dial and its TLS handshake.
	DialTimeout = 3 * time.Second
	// PingAfter is the silence on a connection after which it is pinged;
	// PingTimeout how long the answer may take before the connection,
	// and every call and stream on it, fail.
	PingAfter   = 3 * time.Second
	PingTimeout = 2 * time.Second
	// RetryFor bounds the retries of a call that failed in transport.
	RetryFor = 2 * time.Second
	// UpgradeTimeout bounds the wait for the node to open a tunnel.
	UpgradeTimeout = 10 * time.Second
	// quickCall bounds the calls of the contract that take no context.
	quickCall = 10 * time.Second
)

// Config is a node's client's configuration.
type Config struct {
	NodeID string
	// Addr is the node API's host:port.
	Addr string
	// TLS presents the control plane's client certificate and verifies
	// the node's (the caller verifies the node's identity).
	TLS *tls.Config
	// OnExit is told of the node's command exits, OnDenied of its
	// sandboxes' network denials, in the order the node saw them.
	OnExit   node.ExitFunc
	OnDenied func(sandboxID string, o api.NetworkObservation, suppressed int64)
	// OnInjected is told of the node's gateway's injection reports.
	OnInjected func(sandboxID string, e netpolicy.InjectEvent)
	Log        *slog.Logger
}

// Client calls one node. Run keeps its event stream; Close ends it.
type Client struct {
	cfg  Config
	base string
	hc   *http.Client
	tr   *http.Transport

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// New returns a client of the node at cfg.Addr.
func New(cfg Config) *Client {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	dialer := &net.Dialer{Timeout: DialTimeout, KeepAlive: 15 * time.Second}
	tr := &http.Transport{
		DialContext:         dialer.DialContext,
		TLSClientConfig:     cfg.TLS.Clone(),
		TLSHandshakeTimeout: DialTimeout,
		ForceAttemptHTTP2:   true,
		HTTP2:               &http.HTTP2Config{SendPingTimeout: PingAfter, PingTimeout: PingTimeout},
		IdleConnTimeout:     90 * time.Second,
	}
	tr.Protocols = new(http.Protocols)
	tr.Protocols.SetHTTP1(true)
	tr.Protocols.SetHTTP2(true)
	ctx, cancel := context.WithCancel(context.Background())
	return &Client{
		cfg: cfg, base: "https://" + cfg.Addr + nodeapi.Prefix,
		hc: &http.Client{Transport: tr}, tr: tr, ctx: ctx, cancel: cancel,
	}
}

// Close ends Run, the outputs' streams, and idle connections.
func (c *Client) Close() {
	c.cancel()
	c.wg.Wait()
	c.tr.CloseIdleConnections()
}

// NodeID is the node's ID.
func (c *Client) NodeID() string { return c.cfg.NodeID }

func opID() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// unavailable is the error of a call the node did not answer.
func (c *Client) unavailable(err error) error {
	return &api.Error{Code: api.CodeUnavailable, Message: fmt.Sprintf("node %s does not answer: %v", c.cfg.NodeID, err)}
}

// transportErr turns a failed round trip into the caller's context error
// or unavailable.
func (c *Client) transportErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return c.unavailable(err)
}

// answerErr is the error of a non-2xx answer: the node's coded error as
// it sent it; its internal errors as plain errors, as a local node's are
// (their text is for logs, not users).
func (c *Client) answerErr(resp *http.Response) error {
	var body api.ErrorResponse
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err := json.Unmarshal(b, &body); err != nil || body.Error == nil || body.Error.Code == "" {
		return c.unavailable(fmt.Errorf("answered %s", resp.Status))
	}
	if body.Error.Code == api.CodeInternal {
		return fmt.Errorf("node %s: %s", c.cfg.NodeID, body.Error.Message)
	}
	return body.Error
}

// request is one call to make.
type request struct {
	method, path string
	query        url.Values
	header       http.Header
	// body is a JSON call's arguments (resent on a retry) …
	json []byte
	// … or a stream, sent once.
	stream io.Reader
	// op marks a state-changing call: it carries an operation ID, the
	// same on every retry.
	op bool
}

// do makes the call and returns the node's 2xx answer, whose body the
// caller closes. A JSON call that failed in transport is retried (with
// the same operation ID) for up to RetryFor.
func (c *Client) do(ctx context.Context, rq request) (*http.Response, error) {
	u := c.base + rq.path
	if len(rq.query) > 0 {
		u += "?" + rq.query.Encode()
	}
	id := ""
	switch {
	case rq.op && ids.Derived(ctx):
		// A call of a request under an Idempotency-Key: its ID is derived
		// from the key, the same on the request's second attempt (its
		// first on a replica that died), so a node that ran the call for
		// the first answers the second from memory.
		id = ids.For(ctx, "op")
	case rq.op:
		id = opID()
	}
	var caller *callerBody
	if rq.stream != nil {
		caller = &callerBody{r: rq.stream}
	}
	start := time.Now()
	for attempt := 0; ; attempt++ {
		var body io.Reader
		if caller != nil {
			body = caller
		}
		if rq.json != nil {
			body = bytes.NewReader(rq.json)
		}
		req, err := http.NewRequestWithContext(ctx, rq.method, u, body)
		if err != nil {
			return nil, err
		}
		for k, v := range rq.header {
			req.Header[k] = v
		}
		if rq.json != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		if id != "" {
			req.Header.Set(nodeapi.OperationHeader, id)
		}
		if t, ok := rq.stream.(*trailerBody); ok {
			req.Trailer = t.trailer
		}
		resp, err := c.hc.Do(req)
		if err == nil {
			if resp.StatusCode/100 != 2 {
				defer resp.Body.Close()
				return nil, c.answerErr(resp)
			}
			return resp, nil
		}
		// A call that never reached the node (its dial failed) fails at
		// once; one that may have is retried, when its body can be sent
		// again.
		if caller != nil && caller.failed() != nil {
			return nil, caller.failed() // the caller's body failed, not the node
		}
		if ctx.Err() != nil || rq.stream != nil || dialFailed(err) || time.Since(start) > RetryFor {
			return nil, c.transportErr(ctx, err)
		}
		c.cfg.Log.Debug("retrying a node call", "node", c.cfg.NodeID, "path", rq.path, "err", err)
		select {
		case <-time.After(time.Duration(100*(attempt+1)) * time.Millisecond):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// call makes a JSON call of the node and decodes its answer into out
// (nil: none).
func (c *Client) call(ctx context.Context, name string, changes bool, args nodeapi.Call, out any) error {
	b, err := json.Marshal(args)
	if err != nil {
		return err
	}
	resp, err := c.do(ctx, request{method: http.MethodPost, path: name, json: b, op: changes})
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	// 204: the call answers nothing (a node from before the call had an
	// answer leaves out as it was).
	if out == nil || resp.StatusCode == http.StatusNoContent {
		io.Copy(io.Discard, resp.Body)
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return c.transportErr(ctx, err)
	}
	return nil
}

// quick is the context of a call the contract makes without one.
func (c *Client) quick() (context.Context, context.CancelFunc) {
	return context.WithTimeout(c.ctx, quickCall)
}

// logged logs the failure of a call whose contract returns no error.
func (c *Client) logged(what string, err error) {
	if err != nil {
		c.cfg.Log.Warn("a node call failed", "node", c.cfg.NodeID, "call", what, "err", err)
	}
}

// dialFailed reports an error of a connection that was never made, or
// made to a peer that is not the node.
func dialFailed(err error) bool {
	var op *net.OpError
	var id identityError
	return errors.As(err, &op) && op.Op == "dial" || errors.As(err, &id)
}

// callerBody is a call's streamed body; it keeps the error the body
// itself failed with, which is the caller's, not the node's.
type callerBody struct {
	r   io.Reader
	mu  sync.Mutex
	err error
}

func (b *callerBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err != nil && err != io.EOF {
		b.mu.Lock()
		if b.err == nil {
			b.err = err
		}
		b.mu.Unlock()
	}
	return n, err
}

// failed is the error the body failed with, if it did.
func (b *callerBody) failed() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}
