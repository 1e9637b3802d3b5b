package cove

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cove-dev/cove/api"
)

// fileServer serves body for every download with the Repr-Digest of
// announced, and records the trailer digest of an upload.
func fileServer(t *testing.T, body, announced []byte, gotTrailer *string) *Client {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut {
			io.Copy(io.Discard, r.Body)
			*gotTrailer = r.Trailer.Get("Repr-Digest")
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"name":"f","path":"/f","type":"file","size":3,"mode":"0644","version":"v1"}`)
			return
		}
		sum := sha256.Sum256(announced)
		w.Header().Set("Repr-Digest", api.FormatReprDigest(sum[:]))
		w.Header().Set("ETag", `"v1"`)
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.Write(body)
	}))
	t.Cleanup(srv.Close)
	return New(srv.URL, "k")
}

func TestDownloadChecksDigest(t *testing.T) {
	for _, tt := range []struct {
		name            string
		body, announced []byte
		wantErr         error
	}{
		{"matching", []byte("hello"), []byte("hello"), nil},
		{"mismatch", []byte("hellO"), []byte("hello"), ErrDigestMismatch},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := fileServer(t, tt.body, tt.announced, nil)
			var buf bytes.Buffer
			f, err := c.DownloadFile(t.Context(), "sb", "/f", &buf)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("DownloadFile: %v, want %v", err, tt.wantErr)
			}
			if err == nil && (f.Version != "v1" || buf.String() != string(tt.body)) {
				t.Errorf("got %q version %q", buf.String(), f.Version)
			}
		})
	}
}

func TestUploadSendsDigestTrailer(t *testing.T) {
	var got string
	c := fileServer(t, nil, nil, &got)
	if _, err := c.WriteFile(t.Context(), "sb", "/f", bytes.NewReader([]byte("abc"))); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte("abc"))
	if got != api.FormatReprDigest(sum[:]) {
		t.Errorf("trailer %q, want the sha-256 of the body", got)
	}
}

// chunkServer answers one upload at the level of its bytes: it returns
// the sizes of the body's chunks, the bytes and the trailer lines.
func chunkServer(t *testing.T) (*Client, <-chan chunked) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	out := make(chan chunked, 1)
	go func() {
		conn, err := l.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		var c chunked
		c.err = readChunked(bufio.NewReader(conn), &c)
		out <- c
		io.WriteString(conn, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}")
	}()
	return New("http://"+l.Addr().String(), "k"), out
}

type chunked struct {
	sizes   []int
	body    []byte
	trailer []string
	err     error
}

func readChunked(br *bufio.Reader, c *chunked) error {
	line := func() (string, error) {
		s, err := br.ReadString('\n')
		return strings.TrimRight(s, "\r\n"), err
	}
	for { // the request's head
		s, err := line()
		if err != nil {
			return err
		}
		if s == "" {
			break
		}
	}
	for {
		s, err := line()
		if err != nil {
			return err
		}
		n, err := strconv.ParseInt(s, 16, 64)
		if err != nil {
			return err
		}
		if n == 0 {
			break
		}
		c.sizes = append(c.sizes, int(n))
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(br, buf); err != nil {
			return err
		}
		c.body = append(c.body, buf[:n]...)
	}
	for {
		s, err := line()
		if err != nil || s == "" {
			return err
		}
		c.trailer = append(c.trailer, s)
	}
}

// TestUploadChunks: an upload goes in chunks of uploadChunk bytes (not
// the transport's 32 KiB), from a reader that can seek and from one that
// cannot, with the sha-256 of all of it in the trailer.
func TestUploadChunks(t *testing.T) {
	data := make([]byte, 3*uploadChunk+5)
	for i := range data {
		data[i] = byte(i*13 + i>>10)
	}
	sum := sha256.Sum256(data)
	for name, r := range map[string]func() io.Reader{
		"seeker": func() io.Reader { return bytes.NewReader(data) },
		"stream": func() io.Reader { return struct{ io.Reader }{bytes.NewReader(data)} },
	} {
		t.Run(name, func(t *testing.T) {
			c, got := chunkServer(t)
			if _, err := c.WriteFile(t.Context(), "sb", "/f", r()); err != nil {
				t.Fatal(err)
			}
			g := <-got
			if g.err != nil {
				t.Fatal(g.err)
			}
			want := []int{uploadChunk, uploadChunk, uploadChunk, 5}
			if !slices.Equal(g.sizes, want) || !bytes.Equal(g.body, data) {
				t.Errorf("chunks %v of %d bytes, want %v of %d", g.sizes, len(g.body), want, len(data))
			}
			if tr := []string{"Repr-Digest: " + api.FormatReprDigest(sum[:])}; !slices.Equal(g.trailer, tr) {
				t.Errorf("trailer %q, want %q", g.trailer, tr)
			}
		})
	}
}
