package client

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/agent/wire"
)

// fakeAgent serves h on a unix socket for the test and returns a client.
func fakeAgent(t *testing.T, h http.HandlerFunc) *Client {
	t.Helper()
	c, _ := fakeAgentConns(t, h)
	return c
}

// fakeAgentConns is fakeAgent that also counts the connections the agent
// accepted.
func fakeAgentConns(t *testing.T, h http.HandlerFunc) (*Client, *atomic.Int64) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "agent.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	conns := new(atomic.Int64)
	srv := &http.Server{Handler: h, ConnState: func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			conns.Add(1)
		}
	}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(l)
	}()
	c := Dial(sock)
	t.Cleanup(func() {
		c.Close()
		srv.Close()
		<-done
	})
	return c, conns
}

func frame(kind byte, seq int64, data []byte) wire.Frame {
	return wire.Frame{Kind: kind, Seq: seq, Data: data}
}

func frames(fs ...wire.Frame) []byte {
	var b bytes.Buffer
	for _, f := range fs {
		wire.WriteFrame(&b, f)
	}
	return b.Bytes()
}

// TestClientErrors checks how the answers of an agent become errors: bounded,
// and coded only with the codes of the protocol.
func TestClientErrors(t *testing.T) {
	tests := []struct {
		name   string
		status int
		body   string
		code   api.Code
		msg    string
	}{
		{"coded", 409, `{"error":"busy","code":"conflict"}`, api.CodeConflict, "busy"},
		{"out of processes", 429, `{"error":"no pids","code":"resource_exhausted"}`, api.CodeResourceExhausted, "no pids"},
		{"disk full", 507, `{"error":"full","code":"insufficient_storage"}`, api.CodeInsufficientStorage, "full"},
		{"unknown code", 400, `{"error":"x","code":"weird"}`, api.CodeInternal, "agent: x (unknown code \"weird\")"},
		{"not json", 502, "plain text\n", api.CodeInternal, "agent: plain text"},
		{"empty", 500, "", api.CodeInternal, "agent: Internal Server Error"},
		{"long", 400, `{"error":"` + strings.Repeat("x", 10000) + `","code":"invalid_argument"}`, api.CodeInvalidArgument, strings.Repeat("x", maxErrorMessage) + "…"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := fakeAgent(t, func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(tt.status)
				io.WriteString(w, tt.body)
			})
			err := c.Signal(t.Context(), "x", "TERM")
			if got := api.ErrorCode(err); got != tt.code {
				t.Fatalf("error %v has code %s, want %s", err, got, tt.code)
			}
			var e *api.Error
			switch {
			case tt.code == api.CodeInternal && errors.As(err, &e):
				t.Errorf("internal error %v is an *api.Error; users would see the agent's message", err)
			case tt.code == api.CodeInternal && !strings.HasSuffix(err.Error(), tt.msg):
				t.Errorf("error %q, want it to end with %q", err, tt.msg)
			case tt.code != api.CodeInternal && api.ErrorMessage(err) != tt.msg:
				t.Errorf("message %q, want %q", api.ErrorMessage(err), tt.msg)
			}
		})
	}
}

func TestClientValidates(t *testing.T) {
	exit := []byte(`{"exit_code":0}`)
	tests := []struct {
		name string
		body []byte
		want error // of the first failing Next
	}{
		{"seq repeated", frames(frame(wire.FrameStdout, 1, []byte("a")), frame(wire.FrameStdout, 1, []byte("b"))), wire.ErrBadFrame},
		{"seq not after", frames(frame(wire.FrameStdout, 0x7fff_ffff_ffff_ffff, nil), frame(wire.FrameStdout, 5, nil)), wire.ErrBadFrame},
		{"exit not json", frames(frame(wire.FrameExit, 1, []byte("{"))), wire.ErrBadFrame},
		{"exit code", frames(frame(wire.FrameExit, 1, []byte(`{"exit_code":1000}`))), wire.ErrBadFrame},
		{"exit signal", frames(frame(wire.FrameExit, 1, []byte(`{"exit_code":-1,"signal":"../x"}`))), wire.ErrBadFrame},
		{"dropped size", frames(frame(wire.FrameDropped, 1, []byte("x"))), wire.ErrBadFrame},
		{"kind", []byte{9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0}, wire.ErrBadFrame},
		{"truncated", frames(frame(wire.FrameStdout, 1, []byte("abc")))[:18], wire.ErrBadFrame},
		{"cut before exit", frames(frame(wire.FrameStdout, 1, []byte("a"))), io.ErrUnexpectedEOF},
		{"fine", frames(frame(wire.FrameStdout, 1, []byte("a")), frame(wire.FrameStderr, 3, []byte("b")), frame(wire.FrameExit, 4, exit)), io.EOF},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := fakeAgent(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/octet-stream")
				w.Write(tt.body)
			})
			s, err := c.Output(t.Context(), "x", 0)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			for {
				if _, err = s.Next(); err != nil {
					break
				}
			}
			if !errors.Is(err, tt.want) {
				t.Errorf("error %v, want %v", err, tt.want)
			}
			if _, again := s.Next(); !errors.Is(again, tt.want) {
				t.Errorf("second error %v, want %v", again, tt.want)
			}
		})
	}
}

func TestClientBadAnswers(t *testing.T) {
	tests := []struct {
		name  string
		ctype string
		body  string
		call  func(*Client) error
	}{
		{"output content type", "text/html", "<html>", func(c *Client) error {
			_, err := c.Output(t.Context(), "x", 0)
			return err
		}},
		{"exec other id", "application/json", `{"id":"other","pid":5,"running":true}`, func(c *Client) error {
			_, err := c.Exec(t.Context(), wire.ExecRequest{ID: "x", Argv: []string{"true"}})
			return err
		}},
		{"exec bad pid", "application/json", `{"id":"x","pid":0}`, func(c *Client) error {
			_, err := c.Exec(t.Context(), wire.ExecRequest{ID: "x", Argv: []string{"true"}})
			return err
		}},
		{"huge json", "application/json", `[` + strings.Repeat(`{"id":"x","pid":1},`, wire.MaxJSON/18) + `{"id":"x","pid":1}]`, func(c *Client) error {
			_, err := c.Commands(t.Context())
			return err
		}},
		{"ping", "application/json", `{"version":0}`, func(c *Client) error {
			_, err := c.Ping(t.Context())
			return err
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := fakeAgent(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", tt.ctype)
				io.WriteString(w, tt.body)
			})
			if err := tt.call(c); err == nil {
				t.Error("accepted")
			}
		})
	}
}

// TestClientReusesConnections checks that calls share one kept-alive
// connection, whatever they answered: every body is drained and closed.
func TestClientReusesConnections(t *testing.T) {
	c, conns := fakeAgentConns(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/ping":
			io.WriteString(w, `{"version":1,"pid":1}`)
		case "/v1/commands/done/output":
			w.WriteHeader(http.StatusNoContent)
		case "/v1/commands/x/stdin":
			io.Copy(io.Discard, r.Body)
			w.WriteHeader(http.StatusNoContent)
		default:
			w.WriteHeader(http.StatusConflict)
			io.WriteString(w, `{"error":"busy","code":"conflict"}`)
		}
	})
	ctx := t.Context()
	calls := []struct {
		name string
		call func() error
		fail bool
	}{
		{"ping", func() error { _, err := c.Ping(ctx); return err }, false},
		{"error answer", func() error { return c.Signal(ctx, "x", "TERM") }, true},
		{"stdin", func() error { return c.Stdin(ctx, "x", strings.NewReader("data"), true) }, false},
		{"ended output", func() error {
			s, err := c.Output(ctx, "done", 3)
			if err != nil {
				return err
			}
			defer s.Close()
			if _, err := s.Next(); err != io.EOF {
				return fmt.Errorf("next: %v, want EOF", err)
			}
			return nil
		}, false},
		{"error answer again", func() error { return c.Forget(ctx, "x") }, true},
		{"ping again", func() error { _, err := c.Ping(ctx); return err }, false},
	}
	for _, call := range calls {
		if err := call.call(); (err != nil) != call.fail {
			t.Fatalf("%s: error %v, want failure %v", call.name, err, call.fail)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("%d calls in a row opened %d connections, want 1", len(calls), n)
	}
}

// TestClientStreamsDoNotWaitForThePool holds more output streams open than
// the pool keeps idle connections and checks that calls still get through.
func TestClientStreamsDoNotWaitForThePool(t *testing.T) {
	release := make(chan struct{})
	var streaming sync.WaitGroup
	const streams = 2 * maxIdleConns
	streaming.Add(streams)
	c := fakeAgent(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/ping" {
			io.WriteString(w, `{"version":1,"pid":1}`)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.WriteHeader(http.StatusOK)
		http.NewResponseController(w).Flush()
		streaming.Done()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	defer close(release)
	var open []*OutputStream
	for i := range streams {
		s, err := c.Output(t.Context(), fmt.Sprint("cmd", i), 0)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		open = append(open, s)
	}
	streaming.Wait() // every stream holds a connection of its own
	if _, err := c.Ping(t.Context()); err != nil {
		t.Fatalf("ping while %d streams are open: %v", len(open), err)
	}
}

// TestExecOutputAnswers: a start answered with its output stream (the
// status in its header) streams; one answered with the status alone (an
// agent of an earlier version) gives no stream and the status; a status
// header that is not a command's status, or for another command, fails.
func TestExecOutputAnswers(t *testing.T) {
	status := `{"id":"cmd_1","pid":7,"running":true,"last_seq":0}`
	tests := []struct {
		name       string
		h          http.HandlerFunc
		wantStream bool
		wantErr    bool
	}{
		{"stream", func(w http.ResponseWriter, r *http.Request) {
			if r.URL.RawQuery != wire.StreamQuery {
				t.Errorf("query %q, want %q", r.URL.RawQuery, wire.StreamQuery)
			}
			w.Header().Set(wire.StatusHeader, status)
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Write(frames(frame(wire.FrameStdout, 1, []byte("hi")), frame(wire.FrameExit, 2, []byte(`{"exit_code":0}`))))
		}, true, false},
		{"status alone", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, status)
		}, false, false},
		{"bad status header", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set(wire.StatusHeader, "{")
			w.Header().Set("Content-Type", "application/octet-stream")
		}, false, true},
		{"another command", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set(wire.StatusHeader, `{"id":"cmd_2","pid":7}`)
			w.Header().Set("Content-Type", "application/octet-stream")
		}, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := fakeAgent(t, tt.h)
			st, s, err := c.ExecOutput(t.Context(), wire.ExecRequest{ID: "cmd_1", Argv: []string{"x"}})
			if tt.wantErr {
				if err == nil || s != nil {
					t.Fatalf("got %+v, stream %v, err %v; want an error", st, s, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if st.ID != "cmd_1" || st.PID != 7 {
				t.Errorf("status %+v", st)
			}
			if (s != nil) != tt.wantStream {
				t.Fatalf("stream %v, want one: %v", s, tt.wantStream)
			}
			if s == nil {
				return
			}
			defer s.Close()
			var got []string
			for {
				f, err := s.Next()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, fmt.Sprintf("%d:%d:%s", f.Seq, f.Kind, f.Data))
			}
			if want := []string{"1:1:hi", `2:3:{"exit_code":0}`}; fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("frames %q, want %q", got, want)
			}
		})
	}
}

// TestStreamReadToItsExitKeepsItsConnection: a command's output stream
// read to its exit frame leaves its connection for the next call, both
// the one a start opened and one asked for later. An agent that never
// ends its answer after the exit frame does not hold Close.
func TestStreamReadToItsExitKeepsItsConnection(t *testing.T) {
	status := `{"id":"cmd_1","pid":7,"running":true,"last_seq":0}`
	hold, exitRead := make(chan struct{}), make(chan struct{}, 1)
	c, conns := fakeAgentConns(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/ping":
			io.WriteString(w, `{"version":1,"pid":1}`)
			return
		case "/v1/commands":
			w.Header().Set(wire.StatusHeader, status)
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		rc := http.NewResponseController(w)
		w.Write(frames(frame(wire.FrameStdout, 1, []byte("hi"))))
		rc.Flush()
		w.Write(frames(frame(wire.FrameExit, 2, []byte(`{"exit_code":0}`))))
		rc.Flush()
		if r.URL.Path == "/v1/commands/cmd_hung/output" {
			<-hold // the answer never ends
			return
		}
		// The answer ends once the client has the exit frame, so that
		// reading it cannot have read the end as well.
		<-exitRead
	})
	t.Cleanup(func() { close(hold) })
	ctx := t.Context()
	readAll := func(s *OutputStream) {
		t.Helper()
		defer s.Close()
		for {
			f, err := s.Next()
			if err == io.EOF {
				return
			} else if err != nil {
				t.Fatal(err)
			}
			if f.Kind == wire.FrameExit && s.id != "cmd_hung" {
				exitRead <- struct{}{}
			}
		}
	}
	_, s, err := c.ExecOutput(ctx, wire.ExecRequest{ID: "cmd_1", Argv: []string{"x"}})
	if err != nil {
		t.Fatal(err)
	}
	readAll(s)
	if s, err = c.Output(ctx, "cmd_1", 0); err != nil {
		t.Fatal(err)
	}
	readAll(s)
	if _, err := c.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("a start, a stream and a ping opened %d connections, want 1", n)
	}
	if s, err = c.Output(ctx, "cmd_hung", 0); err != nil {
		t.Fatal(err)
	}
	readAll(s) // returns: Close does not wait for an end that never comes
	if _, err := c.Ping(ctx); err != nil {
		t.Fatal(err)
	}
}
