package netpolicy

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"net/http/httputil"
	"testing"
)

// FuzzClassify: whatever a client sends first, a request the gateway takes
// for HTTP is rewritten into one that still parses, names the same host,
// and asks the server to close the connection after it.
func FuzzClassify(f *testing.F) {
	for _, s := range []string{
		"GET / HTTP/1.1\r\nHost: api.example.test\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a.test\r\nConnection: keep-alive, Upgrade\r\nUpgrade: websocket\r\n\r\nframes",
		"POST /x HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
		"GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\nKeep-Alive: 5\r\nProxy-Connection: keep-alive\r\n\r\n",
		"\r\nGET / HTTP/1.1\r\n\r\n",
		"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
		"\x16\x03\x01\x00\x05hello",
		"SSH-2.0-OpenSSH_9.2\r\n",
		"GE",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		s, _ := classify(b)
		if s.proto != protoHTTP {
			return
		}
		h := closingHeader(b[:s.headerLen], isWebSocket(s.req))
		req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(h)))
		if err != nil {
			t.Fatalf("rewritten header %q does not parse: %v", h, err)
		}
		if !req.Close || hostName(req.Host) != s.name {
			t.Fatalf("rewritten header %q: close %v, host %q (was %q)", h, req.Close, req.Host, s.name)
		}
		again, _ := classify(h)
		if again.proto != protoHTTP || again.name != s.name || again.headerLen != len(h) {
			t.Fatalf("rewritten header %q classifies as %v %q", h, again.proto, again.name)
		}
	})
}

// FuzzCopyChunked: what copyChunked forwards as one chunked body is one
// whole chunked body to a standard reader, and a prefix of its input.
func FuzzCopyChunked(f *testing.F) {
	for _, s := range []string{
		"5\r\nhello\r\n0\r\n\r\n",
		"5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nTrailer: x\r\n\r\nGET / HTTP/1.1\r\n\r\n",
		"0\r\n\r\n",
		"5\nhello\n0\n\n",
		"ffffffffffffffff\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var out bytes.Buffer
		if err := copyChunked(&out, bufio.NewReader(bytes.NewReader(b))); err != nil {
			return
		}
		if !bytes.HasPrefix(b, out.Bytes()) {
			t.Fatalf("forwarded %q, not a prefix of %q", out.Bytes(), b)
		}
		r := bufio.NewReader(bytes.NewReader(out.Bytes()))
		if _, err := io.Copy(io.Discard, httputil.NewChunkedReader(r)); err != nil {
			t.Fatalf("forwarded %q: %v", out.Bytes(), err)
		}
	})
}
