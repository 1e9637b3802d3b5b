// Package client is the host's side of the agent protocol (package wire):
// one Client per sandbox, over the unix socket of its cove-agent.
//
// What the agent answers is untrusted: the client bounds every read and
// validates every field, and it translates every error the agent answers
// into cove's error type in one place (asError), so the node passes them
// through as they are.
package client

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/agent/wire"
)

// Client is the host's side of the protocol, over the agent's unix socket.
// It is safe for concurrent use.
//
// Calls share a small pool of persistent connections (HTTP/1.1 keep-alive)
// instead of dialling each time. The pool bounds only the idle connections:
// a long-lived stream (an output follow, a stdin stream) holds a connection
// of its own for as long as it lasts, and no call ever waits for one to be
// free.
//
// No call waits on the agent without a bound (see Timeouts): dialling, the
// answer's headers and the whole of a short call have deadlines; a call
// that may rightly last (a stream, a big file, an edit) is watched instead:
// while it is open the client pings the agent on another connection, and
// the call fails once the agent stops answering. A hung agent thus costs
// its own sandbox's calls, never a caller that waits forever.
type Client struct {
	to Timeouts
	tr *http.Transport
	hc *http.Client
}

// Timeouts bound the calls to an agent. A zero field takes its default.
type Timeouts struct {
	// Dial bounds connecting to the agent's socket. Default 5s.
	Dial time.Duration
	// Header bounds the wait for an answer's headers once a request was
	// sent, for every call: a backstop for an agent that answers pings
	// but not the call. Default 5 minutes (an edit or the digest of a big
	// file may take that long).
	Header time.Duration
	// Call bounds the whole of a short call: ping, exec, the command list,
	// acknowledgements, signals, resizes, forgets, stat, list, mkdir and
	// move. Default 30s.
	Call time.Duration
	// PingEvery and Silence watch the calls that may rightly last (output
	// streams, stdin, file contents and archives both ways, edits,
	// removes): while one is open, the agent is pinged every PingEvery (at
	// most Silence/2), and the call fails once Silence passed without an
	// answer, counted from the call's start: a hung agent fails a watched
	// call within Silence of its request, as it fails a short call within
	// Call. Defaults 15s and 30s.
	PingEvery, Silence time.Duration
	// Idle closes a pooled connection unused this long. Default 1 minute,
	// less than the agent's own idle timeout (5 minutes), so that a call
	// never goes out on a connection the agent is closing at that moment.
	Idle time.Duration
}

// Defaults of Timeouts.
const (
	DefaultDialTimeout   = 5 * time.Second
	DefaultHeaderTimeout = 5 * time.Minute
	DefaultCallTimeout   = 30 * time.Second
	DefaultPingEvery     = 15 * time.Second
	DefaultSilence       = 30 * time.Second
	DefaultIdleTimeout   = time.Minute
)

func (t Timeouts) withDefaults() Timeouts {
	or := func(d *time.Duration, def time.Duration) {
		if *d <= 0 {
			*d = def
		}
	}
	or(&t.Dial, DefaultDialTimeout)
	or(&t.Header, DefaultHeaderTimeout)
	or(&t.Call, DefaultCallTimeout)
	or(&t.PingEvery, DefaultPingEvery)
	or(&t.Silence, DefaultSilence)
	or(&t.Idle, DefaultIdleTimeout)
	return t
}

// maxIdleConns is how many idle connections to one agent are kept.
const maxIdleConns = 4

// Dial returns a client of the agent listening on socketPath, with the
// default Timeouts. It connects lazily, on the first request, and keeps
// connections for the next ones.
func Dial(socketPath string) *Client { return DialTimeouts(socketPath, Timeouts{}) }

// DialTimeouts is Dial with the given timeouts.
func DialTimeouts(socketPath string, to Timeouts) *Client {
	to = to.withDefaults()
	d := net.Dialer{Timeout: to.Dial}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return d.DialContext(ctx, "unix", socketPath)
		},
		DisableCompression:     true,
		MaxIdleConns:           maxIdleConns,
		MaxIdleConnsPerHost:    maxIdleConns,
		IdleConnTimeout:        to.Idle,
		ResponseHeaderTimeout:  to.Header,
		MaxResponseHeaderBytes: 64 << 10,
		// MaxConnsPerHost stays 0 (no limit): streams must never queue
		// behind each other or behind calls, nor pings behind them.
	}
	return &Client{to: to, tr: tr, hc: &http.Client{Transport: tr}}
}

// Close closes the idle connections. Streams in use stay open until their
// own Close.
func (c *Client) Close() error {
	c.tr.CloseIdleConnections()
	return nil
}

// Ping asks the agent for its protocol version and PID.
func (c *Client) Ping(ctx context.Context) (wire.Ping, error) {
	var p wire.Ping
	if err := c.call(ctx, http.MethodGet, "/v1/ping", nil, &p); err != nil {
		return wire.Ping{}, fmt.Errorf("ping: %w", err)
	}
	if p.Version <= 0 || p.PID <= 0 {
		return wire.Ping{}, fmt.Errorf("ping: bad answer %+v", p)
	}
	return p, nil
}

// Exec starts a command.
func (c *Client) Exec(ctx context.Context, req wire.ExecRequest) (wire.CommandStatus, error) {
	var st wire.CommandStatus
	if err := c.call(ctx, http.MethodPost, "/v1/commands", req, &st); err != nil {
		return wire.CommandStatus{}, fmt.Errorf("exec %s: %w", req.ID, err)
	}
	if st.ID != req.ID {
		return wire.CommandStatus{}, fmt.Errorf("exec %s: agent answered for command %q", req.ID, st.ID)
	}
	if err := checkStatus(st); err != nil {
		return wire.CommandStatus{}, fmt.Errorf("exec %s: %w", req.ID, err)
	}
	return st, nil
}

// ExecOutput starts a command and streams its output from the start in
// the same call (wire.StreamQuery), as Output(ctx, req.ID, 0) would: one
// round trip to the agent instead of two. ctx bounds the start and the
// whole stream, as Output's; the start (until the answer's header) is
// bounded by Timeouts.Call too, as Exec's. An agent that answers the
// status alone (an earlier version) gives a nil stream: ask Output then.
func (c *Client) ExecOutput(ctx context.Context, req wire.ExecRequest) (wire.CommandStatus, *OutputStream, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	fail := func(err error) (wire.CommandStatus, *OutputStream, error) {
		cancel(nil)
		return wire.CommandStatus{}, nil, fmt.Errorf("exec %s: %w", req.ID, err)
	}
	b, err := json.Marshal(req)
	if err != nil {
		return fail(err)
	}
	timer := time.AfterFunc(c.to.Call, func() { cancel(errCallTimeout) })
	resp, err := c.send(ctx, true, http.MethodPost, "/v1/commands?"+wire.StreamQuery, bytes.NewReader(b), "application/json")
	if !timer.Stop() && err == nil {
		resp.Body.Close()
		err = c.failed(ctx, context.Cause(ctx))
	}
	if err != nil {
		return fail(err)
	}
	var st wire.CommandStatus
	var s *OutputStream
	switch resp.StatusCode {
	case http.StatusCreated: // the status alone
		err = json.NewDecoder(io.LimitReader(resp.Body, wire.MaxJSON)).Decode(&st)
		drain(resp)
		if err != nil {
			return fail(fmt.Errorf("decode answer: %w", c.failed(ctx, err)))
		}
	case http.StatusOK, http.StatusNoContent:
		h := resp.Header.Get(wire.StatusHeader)
		if len(h) > wire.MaxJSON || json.Unmarshal([]byte(h), &st) != nil {
			resp.Body.Close()
			return fail(fmt.Errorf("bad %s header from agent: %q", wire.StatusHeader, h))
		}
		s = &OutputStream{c: c, ctx: ctx, cancel: cancel, id: req.ID, body: resp.Body, done: resp.StatusCode == http.StatusNoContent}
		if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); !s.done && mt != "application/octet-stream" {
			resp.Body.Close()
			return fail(fmt.Errorf("%w: content type %q", wire.ErrBadFrame, mt))
		}
	default:
		resp.Body.Close()
		return fail(fmt.Errorf("unexpected status %d", resp.StatusCode))
	}
	if st.ID != req.ID {
		err = fmt.Errorf("agent answered for command %q", st.ID)
	} else {
		err = checkStatus(st)
	}
	if err != nil {
		if s != nil {
			s.Close()
		}
		return fail(err)
	}
	if s == nil {
		cancel(nil)
	}
	return st, s, nil
}

// Commands lists the commands the agent knows, running or not.
func (c *Client) Commands(ctx context.Context) ([]wire.CommandStatus, error) {
	var sts []wire.CommandStatus
	if err := c.call(ctx, http.MethodGet, "/v1/commands", nil, &sts); err != nil {
		return nil, fmt.Errorf("list commands: %w", err)
	}
	for _, st := range sts {
		if err := checkStatus(st); err != nil {
			return nil, fmt.Errorf("list commands: %w", err)
		}
	}
	return sts, nil
}

func checkStatus(st wire.CommandStatus) error {
	if !wire.ValidID(st.ID) || st.PID <= 0 || st.LastSeq < 0 {
		return fmt.Errorf("bad command status from agent: %+v", st)
	}
	return nil
}

// Output streams the output of command id after frame `after`, which it
// acknowledges (the agent may forget frames up to it). See OutputStream.
//
// ctx bounds the whole stream, including the acknowledgements that Next
// sends.
func (c *Client) Output(ctx context.Context, id string, after int64) (*OutputStream, error) {
	if after < 0 {
		return nil, fmt.Errorf("output of %s: negative after %d", id, after)
	}
	path := cmdPath(id, "output") + "?after=" + strconv.FormatInt(after, 10)
	resp, err := c.send(ctx, true, http.MethodGet, path, nil, "")
	if err != nil {
		return nil, fmt.Errorf("output of %s: %w", id, err)
	}
	s := &OutputStream{c: c, ctx: ctx, id: id, body: resp.Body, last: after, acked: after}
	switch resp.StatusCode {
	case http.StatusNoContent:
		s.done = true // the command ended at `after`
		return s, nil
	case http.StatusOK:
	default:
		resp.Body.Close()
		return nil, fmt.Errorf("output of %s: unexpected status %d", id, resp.StatusCode)
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "application/octet-stream" {
		resp.Body.Close()
		return nil, fmt.Errorf("output of %s: %w: content type %q", id, wire.ErrBadFrame, mt)
	}
	return s, nil
}

// OutputStream reads a command's output frames in order. It acknowledges
// what it has handed out once that reaches AckBytes: a call to Next tells
// that the caller is done with the frames before (it has recorded them).
type OutputStream struct {
	c      *Client
	ctx    context.Context         // from Output: bounds the stream and its acks
	cancel context.CancelCauseFunc // when not nil, called at Close
	id     string
	body   io.ReadCloser

	buf     []byte
	last    int64 // seq of the last frame handed out
	acked   int64
	unacked int // FrameCost handed out since the last ack
	done    bool
	err     error
}

// Next returns the next frame. Its Data is valid until the next call. After
// the exit frame it returns io.EOF. A stream that ends before the exit frame
// (the agent restarted, or another reader acknowledged past this one) gives
// an error wrapping io.ErrUnexpectedEOF: open a new one after the last seq.
// Frames that break the protocol give errors wrapping wire.ErrBadFrame.
func (s *OutputStream) Next() (wire.Frame, error) {
	if s.err != nil {
		return wire.Frame{}, s.err
	}
	if s.done {
		return wire.Frame{}, io.EOF
	}
	if s.unacked >= wire.AckBytes {
		if err := s.c.Ack(s.ctx, s.id, s.last); err != nil {
			s.err = fmt.Errorf("output of %s: %w", s.id, err)
			return wire.Frame{}, s.err
		}
		s.acked, s.unacked = s.last, 0
	}
	if s.buf == nil {
		s.buf = make([]byte, wire.MaxFrameData)
	}
	f, err := wire.ReadFrame(s.body, s.buf)
	if err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		if cerr := s.ctx.Err(); cerr != nil && !errors.Is(err, wire.ErrBadFrame) {
			err = cerr
		}
		s.err = fmt.Errorf("output of %s after seq %d: %w", s.id, s.last, err)
		return wire.Frame{}, s.err
	}
	if err := s.check(f); err != nil {
		s.err = fmt.Errorf("output of %s: %w", s.id, err)
		return wire.Frame{}, s.err
	}
	s.last = f.Seq
	s.unacked += wire.FrameCost(f)
	if f.Kind == wire.FrameExit {
		s.done = true
	}
	return f, nil
}

func (s *OutputStream) check(f wire.Frame) error {
	if f.Seq <= s.last {
		return fmt.Errorf("%w: seq %d after %d", wire.ErrBadFrame, f.Seq, s.last)
	}
	switch f.Kind {
	case wire.FrameExit:
		if _, err := wire.ParseExit(f.Data); err != nil {
			return err
		}
	case wire.FrameDropped:
		if len(f.Data) != 8 || int64(binary.BigEndian.Uint64(f.Data)) < 0 {
			return fmt.Errorf("%w: dropped frame of %d bytes", wire.ErrBadFrame, len(f.Data))
		}
	}
	return nil
}

// endPatience bounds how long Close waits for the end of an answer
// whose exit frame was read.
const endPatience = 100 * time.Millisecond

// LastSeq is the seq of the last frame Next returned (or `after`).
func (s *OutputStream) LastSeq() int64 { return s.last }

// Close ends the stream. The agent keeps what was not acknowledged.
func (s *OutputStream) Close() error {
	if s.done && s.err == nil {
		// The agent ends its answer right after the exit frame. Reading
		// that end lets the connection serve the next call (the next
		// command's start, most often) instead of being closed. An agent
		// that does not end it within endPatience has it closed.
		t := time.AfterFunc(endPatience, func() { s.body.Close() })
		_, _ = io.Copy(io.Discard, io.LimitReader(s.body, 4<<10))
		t.Stop()
	}
	err := s.body.Close()
	if s.cancel != nil {
		s.cancel(nil)
	}
	return err
}

// Ack tells the agent it may forget the output of id up to seq.
func (c *Client) Ack(ctx context.Context, id string, seq int64) error {
	path := cmdPath(id, "ack") + "?seq=" + strconv.FormatInt(seq, 10)
	if err := c.call(ctx, http.MethodPost, path, nil, nil); err != nil {
		return fmt.Errorf("acknowledge output of %s to %d: %w", id, seq, err)
	}
	return nil
}

// Stdin streams body into the standard input of id; eof then closes it (for
// a terminal, it sends ^D).
func (c *Client) Stdin(ctx context.Context, id string, body io.Reader, eof bool) error {
	path := cmdPath(id, "stdin") + "?eof=" + strconv.FormatBool(eof)
	if body == nil {
		body = http.NoBody
	}
	resp, err := c.send(ctx, true, http.MethodPost, path, body, "application/octet-stream")
	if err != nil {
		return fmt.Errorf("stdin of %s: %w", id, err)
	}
	drain(resp)
	return nil
}

// Signal sends sig ("TERM", "KILL", …) to the process group of id.
func (c *Client) Signal(ctx context.Context, id, sig string) error {
	if err := c.call(ctx, http.MethodPost, cmdPath(id, "signal"), wire.SignalRequest{Signal: sig}, nil); err != nil {
		return fmt.Errorf("signal %s to %s: %w", sig, id, err)
	}
	return nil
}

// Resize sets the terminal size of id (started with a PTY).
func (c *Client) Resize(ctx context.Context, id string, sz wire.Size) error {
	if err := c.call(ctx, http.MethodPost, cmdPath(id, "resize"), sz, nil); err != nil {
		return fmt.Errorf("resize %s: %w", id, err)
	}
	return nil
}

// Forget makes the agent drop an ended command and its output.
func (c *Client) Forget(ctx context.Context, id string) error {
	if err := c.call(ctx, http.MethodDelete, "/v1/commands/"+url.PathEscape(id), nil, nil); err != nil {
		return fmt.Errorf("forget %s: %w", id, err)
	}
	return nil
}

func cmdPath(id, what string) string {
	return "/v1/commands/" + url.PathEscape(id) + "/" + what
}

// Causes of the client's own bounds (see Timeouts), told apart from the
// caller's cancellations.
var (
	errCallTimeout = errors.New("the call took too long")
	errSilent      = errors.New("the agent stopped answering pings")
)

// call is a short call, bounded whole by Timeouts.Call: it sends in as
// JSON (when not nil) and decodes a 2xx answer into out (when not nil).
func (c *Client) call(ctx context.Context, method, path string, in, out any) error {
	ctx, cancel := context.WithTimeoutCause(ctx, c.to.Call, errCallTimeout)
	defer cancel()
	return c.roundTrip(ctx, false, method, path, in, out)
}

// callWatched is call for a call that may rightly last (an edit, a
// recursive remove): watched instead of bounded.
func (c *Client) callWatched(ctx context.Context, method, path string, in, out any) error {
	return c.roundTrip(ctx, true, method, path, in, out)
}

func (c *Client) roundTrip(ctx context.Context, watched bool, method, path string, in, out any) error {
	var body io.Reader
	ctype := ""
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body, ctype = bytes.NewReader(b), "application/json"
	}
	resp, err := c.send(ctx, watched, method, path, body, ctype)
	if err != nil {
		return err
	}
	defer drain(resp)
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, wire.MaxJSON)).Decode(out); err != nil {
		return fmt.Errorf("decode answer: %w", c.failed(ctx, err))
	}
	return nil
}

// send does a request and turns a non-2xx answer into an error (asError).
func (c *Client) send(ctx context.Context, watched bool, method, path string, body io.Reader, ctype string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, "http://agent"+path, body)
	if err != nil {
		return nil, err
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := c.do(req, watched)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		defer drain(resp)
		return nil, readError(resp)
	}
	return resp, nil
}

// do sends req. A watched request, and then its answer's body until it is
// closed, is cancelled when the agent stops answering pings (see
// Timeouts.Silence).
func (c *Client) do(req *http.Request, watched bool) (*http.Response, error) {
	if !watched {
		resp, err := c.hc.Do(req)
		if err != nil {
			return nil, c.failed(req.Context(), err)
		}
		return resp, nil
	}
	ctx, cancel := context.WithCancelCause(req.Context())
	body := req.Body
	w := c.watch(ctx, func(cause error) {
		cancel(cause)
		// The transport waits for a read of the request's body under way
		// before it gives up: a stdin stream fed by a pipe (an attached
		// terminal) would wait on the user's next input. Closing a pipe
		// ends that read now; the transport would close it anyway once
		// the call ended. Other bodies may block in Close (a server's
		// request body does until its read ends), so they are left to
		// the transport.
		if pr, ok := body.(*io.PipeReader); ok {
			pr.CloseWithError(c.failed(ctx, cause))
		}
	})
	resp, err := c.hc.Do(req.WithContext(ctx))
	if err != nil {
		w.stop()
		err = c.failed(ctx, err)
		cancel(nil)
		return nil, err
	}
	resp.Body = &watchedBody{rc: resp.Body, c: c, ctx: ctx, end: func() {
		w.stop()
		cancel(nil)
	}}
	return resp, nil
}

// failed turns the error of a call into what the caller sees: when the
// call ended on one of the client's bounds, not on the caller's own
// context, it is unavailable: the agent is not answering.
func (c *Client) failed(ctx context.Context, err error) error {
	var nerr net.Error
	switch cause := context.Cause(ctx); {
	case errors.Is(cause, errCallTimeout):
		return fmt.Errorf("%w (%v)", api.Errorf(api.CodeUnavailable, "the sandbox's agent did not answer within %v; try again", c.to.Call), err)
	case errors.Is(cause, errSilent):
		return fmt.Errorf("%w (%v)", api.Errorf(api.CodeUnavailable, "the sandbox's agent stopped answering (no answer for %v); try again", c.to.Silence), cause)
	case ctx.Err() == nil && errors.As(err, &nerr) && nerr.Timeout():
		return fmt.Errorf("%w (%v)", api.Errorf(api.CodeUnavailable, "the sandbox's agent did not answer in time; try again"), err)
	}
	return err
}

// watch pings the agent every PingEvery until stop, and fails the call
// (its context, through fail) once Silence has passed without an answer:
// counted from the call's start, then from the sending of the last ping
// answered. A call to an agent hung from the start thus fails within
// Silence of the request, as a short call does within Call; one whose agent
// answers lives on. Pings go out at least twice per Silence, so that an
// answering agent always has time to answer.
func (c *Client) watch(ctx context.Context, fail context.CancelCauseFunc) *watch {
	wctx, cancel := context.WithCancel(ctx)
	w := &watch{cancel: cancel}
	every := min(c.to.PingEvery, c.to.Silence/2)
	w.wg.Go(func() {
		deadline := time.Now().Add(c.to.Silence)
		t := time.NewTimer(every)
		defer t.Stop()
		for {
			select {
			case <-wctx.Done():
				return
			case <-t.C:
			}
			sent := time.Now()
			pctx, pcancel := context.WithDeadline(wctx, deadline)
			_, err := c.Ping(pctx)
			pcancel()
			if err != nil {
				if wctx.Err() == nil {
					fail(fmt.Errorf("%w: %v", errSilent, err))
				}
				return
			}
			deadline = sent.Add(c.to.Silence)
			t.Reset(every)
		}
	})
	return w
}

// watch is the pinging of one watched call.
type watch struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// stop ends the pinging and waits for it.
func (w *watch) stop() {
	w.cancel()
	w.wg.Wait()
}

// watchedBody is the body of a watched call's answer: the call stays
// watched until it is closed.
type watchedBody struct {
	rc   io.ReadCloser
	c    *Client
	ctx  context.Context
	once sync.Once
	end  func()
}

func (b *watchedBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if err != nil && err != io.EOF {
		err = b.c.failed(b.ctx, err)
	}
	return n, err
}

func (b *watchedBody) Close() error {
	err := b.rc.Close()
	b.once.Do(b.end)
	return err
}

// drain reads a little of what is left so the connection can be reused,
// and closes the body.
func drain(resp *http.Response) {
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
}
