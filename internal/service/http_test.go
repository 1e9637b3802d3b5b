package service

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// TestHTTPServerBounds: the API's server closes a kept-alive connection
// that stays idle, and answers 431 to headers over the limit.
func TestHTTPServerBounds(t *testing.T) {
	cfg := DefaultConfig().HTTP
	cfg.IdleTimeout = 50 * time.Millisecond
	hs := newHTTPServer(cfg, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}), t.Context())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); hs.Serve(ln) }()
	t.Cleanup(func() { hs.Close(); <-done })

	t.Run("idle connection closed", func(t *testing.T) {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		br := bufio.NewReader(c)
		resp := roundTrip(t, c, br, "GET / HTTP/1.1\r\nHost: cove\r\n\r\n")
		if resp.StatusCode != http.StatusOK || resp.Close {
			t.Fatalf("first answer: %s, close %v", resp.Status, resp.Close)
		}
		// Then nothing: the server must close the connection. The deadline
		// only keeps a broken server from hanging the test.
		c.SetReadDeadline(time.Now().Add(time.Minute))
		if n, err := br.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
			t.Fatalf("idle connection: read %d, %v; want EOF (closed by the server)", n, err)
		}
	})
	t.Run("headers over the limit", func(t *testing.T) {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		big := strings.Repeat("a", 2*cfg.MaxHeaderBytes)
		resp := roundTrip(t, c, bufio.NewReader(c), "GET / HTTP/1.1\r\nHost: cove\r\nX-Big: "+big+"\r\n\r\n")
		if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
			t.Errorf("%d bytes of headers: %s, want 431", len(big), resp.Status)
		}
	})
}

func roundTrip(t *testing.T, c net.Conn, br *bufio.Reader, req string) *http.Response {
	t.Helper()
	c.SetDeadline(time.Now().Add(time.Minute))
	if _, err := io.WriteString(c, req); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Logf("write: %v", err) // a refused request may be cut short
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	c.SetDeadline(time.Time{})
	return resp
}
