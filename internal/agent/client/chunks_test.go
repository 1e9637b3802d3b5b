package client

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// chunkAgent answers one upload at the level of its bytes, on a unix
// socket: it reports the sizes of the body's chunks, the bytes and the
// trailer lines.
func chunkAgent(t *testing.T) (*Client, <-chan chunked) {
	t.Helper()
	l, err := net.Listen("unix", filepath.Join(t.TempDir(), "agent.sock"))
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
		const info = `{"name":"f","path":"/f","type":"file","size":1,"mode":420,"version":"AAAAAAAAAAAAAAAA","uid":0,"gid":0}`
		io.WriteString(conn, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: "+
			strconv.Itoa(len(info))+"\r\n\r\n"+info)
	}()
	c := Dial(l.Addr().String())
	t.Cleanup(func() { c.Close() })
	return c, out
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

// TestWriteChunks: an upload of unknown length goes to the agent in
// chunks of bodyChunk bytes (not the transport's 32 KiB), with its
// trailer digest or without one.
func TestWriteChunks(t *testing.T) {
	data := make([]byte, 3*bodyChunk+5)
	for i := range data {
		data[i] = byte(i*13 + i>>10)
	}
	for _, trailer := range []bool{true, false} {
		t.Run(strconv.FormatBool(trailer), func(t *testing.T) {
			c, got := chunkAgent(t)
			req := WriteRequest{Path: "/f", Mode: -1, Size: -1}
			var want []string
			if trailer {
				req.TrailerSHA256 = func() (string, error) { return strings.Repeat("ab", 32), nil }
				want = []string{"Cove-Sha256: " + strings.Repeat("ab", 32)}
			}
			// A stream of the body as the server passes it on: reads of
			// at most bodyChunk bytes.
			body := struct{ io.Reader }{bytes.NewReader(data)}
			if _, _, err := c.WriteFile(t.Context(), req, body); err != nil {
				t.Fatal(err)
			}
			g := <-got
			if g.err != nil {
				t.Fatal(g.err)
			}
			sizes := []int{bodyChunk, bodyChunk, bodyChunk, 5}
			if !slices.Equal(g.sizes, sizes) || !bytes.Equal(g.body, data) {
				t.Errorf("chunks %v of %d bytes, want %v of %d", g.sizes, len(g.body), sizes, len(data))
			}
			if !slices.Equal(g.trailer, want) {
				t.Errorf("trailer %q, want %q", g.trailer, want)
			}
		})
	}
}
