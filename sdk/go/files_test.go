package cove

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"errors"
	"hash"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

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

// TestUploadHashesBesideSending: the first chunk is still being hashed
// when the second one is sent (a body that hashed each chunk before
// going on would never send the second: the hash gives up waiting after
// a while, and the test fails); the trailer holds the digest of all.
func TestUploadHashesBesideSending(t *testing.T) {
	second := make(chan struct{})
	w := &countWriter{at: 2, reached: second}
	h := &gateHash{Hash: sha256.New(), gate: second}
	req, _ := http.NewRequest(http.MethodPut, "http://x/", nil)
	req.Trailer = http.Header{}
	data := make([]byte, 3*uploadChunk+1)
	b := &digestBody{r: bytes.NewReader(data), h: h, req: req}
	if n, err := b.WriteTo(w); err != nil || n != int64(len(data)) {
		t.Fatalf("WriteTo = %d, %v", n, err)
	}
	if !h.overlapped {
		t.Error("the second chunk was sent only once the first was hashed")
	}
	sum := sha256.Sum256(data)
	if got := req.Trailer.Get("Repr-Digest"); got != api.FormatReprDigest(sum[:]) {
		t.Errorf("trailer %q", got)
	}
}

// countWriter closes reached at its at-th write.
type countWriter struct {
	n, at   int
	reached chan struct{}
}

func (w *countWriter) Write(p []byte) (int, error) {
	if w.n++; w.n == w.at {
		close(w.reached)
	}
	return len(p), nil
}

// gateHash waits, in its first write, for gate (at most 10 s).
type gateHash struct {
	hash.Hash
	gate       chan struct{}
	writes     int
	overlapped bool
}

func (h *gateHash) Write(p []byte) (int, error) {
	if h.writes++; h.writes == 1 {
		select {
		case <-h.gate:
			h.overlapped = true
		case <-time.After(10 * time.Second):
		}
	}
	return h.Hash.Write(p)
}
