package agent

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
)

// fakeAgent serves h on a unix socket for the test and returns a client.
func fakeAgent(t *testing.T, h http.HandlerFunc) *Client {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "agent.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
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
	return c
}

func frames(fs ...Frame) []byte {
	var b bytes.Buffer
	for _, f := range fs {
		WriteFrame(&b, f)
	}
	return b.Bytes()
}

func TestClientErrors(t *testing.T) {
	tests := []struct {
		name   string
		status int
		body   string
		want   Error
	}{
		{"coded", 409, `{"error":"busy","code":"conflict"}`, Error{409, CodeConflict, "busy"}},
		{"out of processes", 429, `{"error":"no pids","code":"resource_exhausted"}`, Error{429, CodeResourceExhausted, "no pids"}},
		{"disk full", 507, `{"error":"full","code":"insufficient_storage"}`, Error{507, CodeInsufficientStorage, "full"}},
		{"unknown code", 400, `{"error":"x","code":"weird"}`, Error{400, "", "x"}},
		{"not json", 502, "plain text\n", Error{502, "", "plain text"}},
		{"empty", 500, "", Error{500, "", "Internal Server Error"}},
		{"long", 400, `{"error":"` + strings.Repeat("x", 10000) + `"}`, Error{400, "", strings.Repeat("x", maxErrorMessage) + "…"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := fakeAgent(t, func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(tt.status)
				io.WriteString(w, tt.body)
			})
			err := c.Signal(t.Context(), "x", "TERM")
			var e *Error
			if !errors.As(err, &e) || *e != tt.want {
				t.Errorf("error %#v, want %#v", err, tt.want)
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
		{"seq repeated", frames(Frame{FrameStdout, 1, []byte("a")}, Frame{FrameStdout, 1, []byte("b")}), ErrBadFrame},
		{"seq not after", frames(Frame{FrameStdout, 0x7fff_ffff_ffff_ffff, nil}, Frame{FrameStdout, 5, nil}), ErrBadFrame},
		{"exit not json", frames(Frame{FrameExit, 1, []byte("{")}), ErrBadFrame},
		{"exit code", frames(Frame{FrameExit, 1, []byte(`{"exit_code":1000}`)}), ErrBadFrame},
		{"exit signal", frames(Frame{FrameExit, 1, []byte(`{"exit_code":-1,"signal":"../x"}`)}), ErrBadFrame},
		{"dropped size", frames(Frame{FrameDropped, 1, []byte("x")}), ErrBadFrame},
		{"kind", []byte{9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0}, ErrBadFrame},
		{"truncated", frames(Frame{FrameStdout, 1, []byte("abc")})[:18], ErrBadFrame},
		{"cut before exit", frames(Frame{FrameStdout, 1, []byte("a")}), io.ErrUnexpectedEOF},
		{"fine", frames(Frame{FrameStdout, 1, []byte("a")}, Frame{FrameStderr, 3, []byte("b")}, Frame{FrameExit, 4, exit}), io.EOF},
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
			_, err := c.Exec(t.Context(), ExecRequest{ID: "x", Argv: []string{"true"}})
			return err
		}},
		{"exec bad pid", "application/json", `{"id":"x","pid":0}`, func(c *Client) error {
			_, err := c.Exec(t.Context(), ExecRequest{ID: "x", Argv: []string{"true"}})
			return err
		}},
		{"huge json", "application/json", `[` + strings.Repeat(`{"id":"x","pid":1},`, MaxJSON/18) + `{"id":"x","pid":1}]`, func(c *Client) error {
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

func FuzzReadFrame(f *testing.F) {
	f.Add(frames(Frame{FrameStdout, 1, []byte("hello")}))
	f.Add(frames(Frame{FrameExit, 7, []byte(`{"exit_code":-1,"signal":"KILL"}`)}))
	f.Add(frames(Frame{FrameStderr, 2, nil}, Frame{FrameDropped, 3, make([]byte, 8)}))
	f.Add([]byte{1, 0, 0, 0})
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0})
	f.Add([]byte{2, 0, 0, 0, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, in []byte) {
		r := bytes.NewReader(in)
		buf := make([]byte, 16)
		for {
			start := len(in) - r.Len()
			fr, err := ReadFrame(r, buf)
			if err != nil {
				if err != io.EOF && !errors.Is(err, ErrBadFrame) {
					t.Fatalf("error %v is neither EOF nor ErrBadFrame", err)
				}
				if err == io.EOF && start != len(in) {
					t.Fatalf("EOF with %d bytes left", len(in)-start)
				}
				return
			}
			if fr.Kind < FrameStdout || fr.Kind > FrameDropped || fr.Seq <= 0 || len(fr.Data) > MaxFrameData {
				t.Fatalf("accepted bad frame %d/%d/%d", fr.Kind, fr.Seq, len(fr.Data))
			}
			// What was read is exactly its wire form.
			consumed := in[start : len(in)-r.Len()]
			// (ReadFrame ignores the 3 reserved bytes.)
			if got := frames(fr); got[0] != consumed[0] || !bytes.Equal(got[4:], consumed[4:]) {
				t.Fatalf("frame %+v does not match its %d bytes", fr, len(consumed))
			}
		}
	})
}
