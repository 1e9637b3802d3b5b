package client

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/agent/wire"
)

// short are timeouts small enough for tests; hung agents are detected in
// a fraction of a second.
var short = Timeouts{
	Dial: 200 * time.Millisecond, Header: 500 * time.Millisecond, Call: 200 * time.Millisecond,
	PingEvery: 20 * time.Millisecond, Silence: 100 * time.Millisecond, Idle: time.Second,
}

// guard is how long a test waits for a call that must end before it calls
// the call hung. It only keeps a broken client from hanging the test run:
// it is far above any bound of short.
const guard = time.Minute

// ended runs call and waits for it to end (or the guard).
func ended(t *testing.T, name string, call func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- call() }()
	select {
	case err := <-done:
		return err
	case <-time.After(guard):
		t.Fatalf("%s still waits on a hung agent after %v", name, guard)
		return nil
	}
}

// wantUnavailable checks that err says the agent is not answering.
func wantUnavailable(t *testing.T, name string, err error) {
	t.Helper()
	if api.ErrorCode(err) != api.CodeUnavailable {
		t.Errorf("%s: %v, want unavailable", name, err)
	}
}

// hungListener is an agent socket that accepts connections (the kernel
// queues them) but never reads or answers, like a stopped agent.
func hungListener(t *testing.T) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "agent.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return sock
}

// TestCallsToAHungAgentEnd: every call to an agent that accepts and never
// answers ends, unavailable, on its own: short calls on their deadline,
// the others (streams, uploads, downloads, edits) when pings go
// unanswered. The caller's context never ends here.
func TestCallsToAHungAgentEnd(t *testing.T) {
	to := short
	to.Header = time.Hour // each call must end on its own bound: Call or Silence
	c := DialTimeouts(hungListener(t), to)
	defer c.Close()
	ctx := context.Background()       // only the client's own bounds may end the calls
	big := strings.Repeat("x", 8<<20) // more than the socket buffers: the upload blocks
	calls := map[string]func() error{
		"ping":     func() error { _, err := c.Ping(ctx); return err },
		"exec":     func() error { _, err := c.Exec(ctx, wire.ExecRequest{ID: "x", Argv: []string{"true"}}); return err },
		"commands": func() error { _, err := c.Commands(ctx); return err },
		"signal":   func() error { return c.Signal(ctx, "x", "TERM") },
		"forget":   func() error { return c.Forget(ctx, "x") },
		"stat":     func() error { _, err := c.StatFile(ctx, "/x"); return err },
		"list":     func() error { _, err := c.ListFiles(ctx, ListRequest{Path: "/"}); return err },
		"mkdir":    func() error { _, err := c.Mkdir(ctx, wire.MkdirRequest{Path: "/x"}); return err },
		"move":     func() error { _, err := c.MoveFile(ctx, wire.MoveRequest{From: "/x", To: "/y"}); return err },
		"edit": func() error {
			_, err := c.EditFile(ctx, wire.EditRequest{Path: "/x", Edits: []wire.FileEdit{{Old: "a", New: "b"}}})
			return err
		},
		"remove": func() error { return c.RemoveFile(ctx, "/x", true) },
		"read": func() error {
			fc, err := c.ReadFile(ctx, "/x", http.Header{})
			if err == nil {
				fc.Body.Close()
			}
			return err
		},
		"write": func() error {
			_, _, err := c.WriteFile(ctx, WriteRequest{Path: "/x", Mode: -1, Size: int64(len(big))}, strings.NewReader(big))
			return err
		},
		"read archive": func() error {
			rc, err := c.ReadArchive(ctx, "/x")
			if err == nil {
				rc.Close()
			}
			return err
		},
		"write archive": func() error { _, err := c.WriteArchive(ctx, "/x", 0, 0, strings.NewReader(big)); return err },
		"output": func() error {
			s, err := c.Output(ctx, "x", 0)
			if err == nil {
				s.Close()
			}
			return err
		},
		"stdin": func() error { return c.Stdin(ctx, "x", strings.NewReader(big), false) },
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			wantUnavailable(t, name, ended(t, name, call))
		})
	}
}

// slowAgent is a fake agent whose ping answers until hung is set; other
// paths are served by h.
type slowAgent struct {
	hung  atomic.Bool
	pings atomic.Int64
}

func (a *slowAgent) serve(t *testing.T, h http.HandlerFunc) *Client {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "agent.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/ping" {
			if a.hung.Load() {
				<-r.Context().Done()
				return
			}
			a.pings.Add(1)
			io.WriteString(w, `{"version":1,"pid":1}`)
			return
		}
		h(w, r)
	})}
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(l)
	}()
	c := DialTimeouts(sock, short)
	t.Cleanup(func() {
		c.Close()
		srv.Close()
		<-done
	})
	return c
}

// waitPings waits until the agent answered n more pings.
func (a *slowAgent) waitPings(t *testing.T, n int64) {
	t.Helper()
	want := a.pings.Load() + n
	for i := 0; a.pings.Load() < want; i++ {
		if i > int(guard/time.Millisecond) {
			t.Fatalf("the client pinged %d times, want %d", a.pings.Load(), want)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestSilentStreamLivesWhileTheAgentAnswers: an output stream of a command
// that prints nothing stays open as long as the agent answers pings (no
// overall deadline), and ends, unavailable, once it stops.
func TestSilentStreamLivesWhileTheAgentAnswers(t *testing.T) {
	var a slowAgent
	c := a.serve(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		wire.WriteFrame(w, wire.Frame{Kind: wire.FrameStdout, Seq: 1, Data: []byte("hi")})
		http.NewResponseController(w).Flush()
		<-r.Context().Done() // then silence
	})
	s, err := c.Output(context.Background(), "x", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if f, err := s.Next(); err != nil || string(f.Data) != "hi" {
		t.Fatalf("first frame %q, %v", f.Data, err)
	}
	next := make(chan error, 1)
	go func() {
		_, err := s.Next()
		next <- err
	}()
	// Many times the stream's whole Call and Silence bounds: still open.
	a.waitPings(t, 20)
	select {
	case err := <-next:
		t.Fatalf("a silent stream of a live agent ended: %v", err)
	default:
	}
	a.hung.Store(true)
	select {
	case err := <-next:
		wantUnavailable(t, "stream of a hung agent", err)
	case <-time.After(guard):
		t.Fatal("the stream of a hung agent is still open")
	}
}

// TestStdinOfAHungAgentEnds: a stdin stream into a command that does not
// read is not cut while the agent answers, and is once it stops: at the
// next input (the transport waits for the body's read under way).
func TestStdinOfAHungAgentEnds(t *testing.T) {
	var a slowAgent
	c := a.serve(t, func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done() // never reads the body: the command's pipe is full
	})
	pr, pw := io.Pipe()
	defer pw.Close()
	done := make(chan error, 1)
	go func() { done <- c.Stdin(context.Background(), "x", pr, false) }()
	pw.Write([]byte("typed"))
	a.waitPings(t, 20)
	select {
	case err := <-done:
		t.Fatalf("stdin of a live agent ended: %v", err)
	default:
	}
	a.hung.Store(true)
	var typing sync.WaitGroup
	typing.Go(func() { // until the call has ended and closed its body
		for {
			if _, err := pw.Write([]byte("more input ")); err != nil {
				return
			}
		}
	})
	defer typing.Wait()
	defer pr.Close()
	select {
	case err := <-done:
		wantUnavailable(t, "stdin of a hung agent", err)
	case <-time.After(guard):
		t.Fatal("stdin into a hung agent is still open")
	}
}

// TestHeaderDeadline: an agent that answers pings but never the call
// itself is given up on after Timeouts.Header, even for a watched call.
func TestHeaderDeadline(t *testing.T) {
	var a slowAgent
	c := a.serve(t, func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	})
	err := ended(t, "read", func() error {
		fc, err := c.ReadFile(context.Background(), "/x", http.Header{})
		if err == nil {
			fc.Body.Close()
		}
		return err
	})
	wantUnavailable(t, "read of an agent that never answers it", err)
}

// TestCallerCancelIsNotUnavailable: a call the caller gives up on ends
// with the caller's error, not as a hung agent.
func TestCallerCancelIsNotUnavailable(t *testing.T) {
	c := DialTimeouts(hungListener(t), Timeouts{Call: time.Hour, Header: time.Hour, PingEvery: time.Hour, Silence: time.Hour})
	defer c.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		s, err := c.Output(ctx, "x", 0)
		if err == nil {
			s.Close()
		}
		done <- err
	}()
	cancel()
	err := <-done
	if !errors.Is(err, context.Canceled) || api.ErrorCode(err) == api.CodeUnavailable {
		t.Errorf("cancelled call: %v, want context.Canceled", err)
	}
}

// TestWatchedCallsFailWithinSilence: a watched call to an agent that never
// answers fails on its Silence, counted from the request, however rarely
// pings are due: with pings due once an hour, reads, writes, archives and
// stdin still end, unavailable (the pings go out at least twice per
// Silence).
func TestWatchedCallsFailWithinSilence(t *testing.T) {
	to := short
	to.Header, to.PingEvery = time.Hour, time.Hour
	c := DialTimeouts(hungListener(t), to)
	defer c.Close()
	ctx := context.Background()
	calls := map[string]func() error{
		"read": func() error {
			fc, err := c.ReadFile(ctx, "/x", http.Header{})
			if err == nil {
				fc.Body.Close()
			}
			return err
		},
		"write": func() error {
			_, _, err := c.WriteFile(ctx, WriteRequest{Path: "/x", Mode: -1, Size: 1}, strings.NewReader("x"))
			return err
		},
		"read archive": func() error {
			rc, err := c.ReadArchive(ctx, "/x")
			if err == nil {
				rc.Close()
			}
			return err
		},
		"stdin": func() error { return c.Stdin(ctx, "x", strings.NewReader("x"), false) },
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			wantUnavailable(t, name, ended(t, name, call))
		})
	}
}

// TestAttachedStdinOfAHungAgentEnds: a stdin stream fed by a pipe (an
// attached terminal whose user types nothing more) ends, unavailable, once
// the agent stops answering, without waiting for the next input, and its
// pipe is closed with the cause.
func TestAttachedStdinOfAHungAgentEnds(t *testing.T) {
	var a slowAgent
	c := a.serve(t, func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	})
	pr, pw := io.Pipe()
	defer pw.Close()
	done := make(chan error, 1)
	go func() { done <- c.Stdin(context.Background(), "x", pr, false) }()
	pw.Write([]byte("typed"))
	a.waitPings(t, 3)
	a.hung.Store(true)
	select {
	case err := <-done:
		wantUnavailable(t, "attached stdin of a hung agent", err)
	case <-time.After(guard):
		t.Fatal("attached stdin into a hung agent waits for the next input")
	}
	if _, err := pw.Write([]byte("late")); api.ErrorCode(err) != api.CodeUnavailable {
		t.Errorf("input after the agent hung: %v, want unavailable", err)
	}
}
