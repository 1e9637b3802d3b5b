package netpolicy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"time"
)

type protocol int

const (
	protoRaw protocol = iota
	protoTLS
	protoHTTP
	// protoBadHTTP is a client that began like an HTTP/1 request but did
	// not complete a request the gateway can check (malformed, too large,
	// or cut short). It is refused, never taken for raw bytes: a server
	// might still read a request, with any Host, from them. A bare word
	// (wordOnly) is the one exception: see Gateway.relayLate.
	protoBadHTTP
)

func (p protocol) String() string {
	switch p {
	case protoTLS:
		return "tls"
	case protoHTTP:
		return "http"
	case protoBadHTTP:
		return "bad http"
	}
	return "raw"
}

const (
	maxSniff      = 64 << 10 // a ClientHello may span several records
	maxHTTPHeader = 16 << 10
)

// sniffed is what the gateway learnt from a client's first bytes.
type sniffed struct {
	proto protocol
	buf   []byte // every byte read from the client so far
	// name is the TLS SNI or HTTP Host without port, normalized; "" when
	// absent or an address literal.
	name      string
	req       *http.Request // protoHTTP only
	headerLen int           // protoHTTP only: length of the request header in buf
	bad       string        // protoBadHTTP only: what is wrong, for the client
	ended     bool          // the client ended its side: buf is all it sent
}

// wordOnly reports whether buf is, after any empty lines, a bare word: the
// first line so far is token characters alone (possibly none). That is the
// start of a request line, but also what a raw client may send and then
// wait for an answer to; on its own it is no request.
func wordOnly(buf []byte) bool {
	i := 0
	for i < len(buf) && (buf[i] == '\r' || buf[i] == '\n') {
		i++
	}
	for _, b := range buf[i:] {
		if !isTokenChar(b) {
			return false
		}
	}
	return true
}

// sniff reads a client's first bytes: it waits up to first for them (so a
// server-speaks-first protocol is decided by address soon; 0 waits as long
// as it takes), then up to rest to complete a TLS ClientHello or an HTTP
// request header. What cannot be recognized in time is raw, unless it began
// like HTTP (protoBadHTTP; ended tells whether the client ended its side).
func sniff(c net.Conn, first, rest time.Duration) (sniffed, error) {
	return sniffFrom(c, nil, first, rest)
}

// sniffFrom is sniff for a client whose first bytes, pre, were read
// already: it classifies them and, if more are needed, waits up to first
// for new bytes (0: as long as it takes), then up to rest for the others.
func sniffFrom(c net.Conn, pre []byte, first, rest time.Duration) (sniffed, error) {
	buf := append(make([]byte, 0, max(4096, len(pre))), pre...)
	if first > 0 {
		if err := c.SetReadDeadline(time.Now().Add(first)); err != nil {
			return sniffed{}, err
		}
	}
	defer c.SetReadDeadline(time.Time{})
	begun := false
	for {
		s, more := classify(buf)
		if !more || len(buf) >= maxSniff {
			return s, nil
		}
		if len(buf) == cap(buf) {
			buf = append(buf, make([]byte, min(cap(buf), maxSniff-len(buf)))...)[:len(buf)]
		}
		n, err := c.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if n > 0 && !begun {
			begun = true
			if err := c.SetReadDeadline(time.Now().Add(rest)); err != nil {
				return sniffed{}, err
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, os.ErrDeadlineExceeded) {
				// What the bytes look like so far: raw, or an HTTP
				// request cut short.
				s, _ := classify(buf)
				s.ended = errors.Is(err, io.EOF)
				return s, nil
			}
			return sniffed{}, err
		}
	}
}

// classify recognizes buf, or asks for more bytes.
func classify(buf []byte) (s sniffed, more bool) {
	s = sniffed{proto: protoRaw, buf: buf}
	if len(buf) == 0 {
		return s, true
	}
	if buf[0] == 0x16 {
		hello, done, err := tlsClientHello(buf)
		if err != nil {
			return s, false
		}
		if !done {
			return s, true
		}
		s.proto = protoTLS
		s.name = hostName(serverName(hello))
		return s, false
	}
	switch httpStart(buf) {
	case notHTTP:
		return s, false
	case maybeHTTP:
		// Until the request line is complete; if it never is, the client
		// is refused rather than spliced (a bare word aside).
		s.proto, s.bad = protoBadHTTP, "incomplete HTTP request line"
		return s, true
	}
	s.proto = protoBadHTTP
	end := bytes.Index(buf, []byte("\r\n\r\n"))
	if end < 0 {
		if len(buf) >= maxHTTPHeader {
			s.bad = "HTTP request header too large"
			return s, false
		}
		s.bad = "incomplete HTTP request header"
		return s, true
	}
	end += 4
	if end > maxHTTPHeader {
		s.bad = "HTTP request header too large"
		return s, false
	}
	req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(buf[:end])))
	if err != nil {
		s.bad = "malformed HTTP request: " + err.Error()
		return s, false
	}
	if why := checkRequest(buf[:end], req); why != "" {
		s.bad = why
		return s, false
	}
	s.proto, s.req, s.headerLen, s.bad = protoHTTP, req, end, ""
	s.name = hostName(req.Host)
	return s, false
}

type httpLike int

const (
	notHTTP httpLike = iota
	maybeHTTP
	isHTTP
)

// httpStart tells whether buf begins like an HTTP/1 request: after any
// empty lines (servers skip them), a request line "method SP target SP
// HTTP/n.n" of any method, in any case, ended by LF or CRLF. It is maybeHTTP
// while the line is incomplete and could still be one. HTTP/2's cleartext
// preface ("PRI * HTTP/2.0") is not HTTP/1: it is raw, decided by address.
func httpStart(buf []byte) httpLike {
	i := 0
	for i < len(buf) && (buf[i] == '\r' || buf[i] == '\n') {
		i++
	}
	line := buf[i:]
	if len(line) > maxHTTPHeader {
		line = line[:maxHTTPHeader]
	}
	// method
	j := 0
	for j < len(line) && isTokenChar(line[j]) {
		j++
	}
	if j == len(line) {
		return maybeHTTP
	}
	if j == 0 || line[j] != ' ' {
		return notHTTP
	}
	method := line[:j]
	j++
	// request target: visible characters
	k := j
	for k < len(line) && line[k] > ' ' && line[k] < 0x7f {
		k++
	}
	if k == len(line) {
		return maybeHTTP
	}
	if k == j || line[k] != ' ' {
		return notHTTP
	}
	k++
	// version
	const version = "http/"
	v := line[k:]
	for n := range min(len(v), len(version)) {
		if v[n]|0x20 != version[n] {
			return notHTTP
		}
	}
	if len(v) <= len(version) {
		return maybeHTTP
	}
	if string(method) == "PRI" && string(line[j:k]) == "* " && bytes.HasPrefix(v, []byte("HTTP/2.0")) {
		return notHTTP
	}
	return isHTTP
}

func isTokenChar(b byte) bool {
	switch {
	case b >= 'a' && b <= 'z', b >= 'A' && b <= 'Z', b >= '0' && b <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", b) >= 0
}

// checkRequest refuses what parses but could be read differently by the
// server than by the gateway: folded header lines, several Host headers,
// a Host header and an absolute URL that name different hosts, or a body
// framed twice (Transfer-Encoding with Content-Length, or several
// Transfer-Encoding headers). header is the raw request header.
func checkRequest(header []byte, req *http.Request) string {
	count := map[string]int{}
	var host string
	lines := bytes.Split(bytes.TrimSuffix(header, []byte("\r\n\r\n")), []byte("\r\n"))
	for _, l := range lines[1:] {
		if len(l) > 0 && (l[0] == ' ' || l[0] == '\t') {
			return "folded HTTP header line"
		}
		if name, value, ok := bytes.Cut(l, []byte(":")); ok {
			n := strings.ToLower(string(name))
			count[n]++
			if n == "host" {
				host = strings.TrimSpace(string(value))
			}
		}
	}
	for i, b := range header {
		if b == '\n' && (i == 0 || header[i-1] != '\r') || b == '\r' && (i+1 == len(header) || header[i+1] != '\n') {
			return "bare CR or LF in the HTTP request header"
		}
	}
	switch {
	case count["host"] > 1:
		return "more than one Host header"
	case count["transfer-encoding"] > 1 || count["transfer-encoding"] > 0 && count["content-length"] > 0:
		return "ambiguous HTTP body length"
	}
	if host != "" && req.URL != nil && req.URL.Host != "" && !sameHost(host, req.URL.Host) {
		return "the Host header and the request URL name different hosts"
	}
	return ""
}

// sameHost compares two Host values, the default HTTP port aside.
func sameHost(a, b string) bool {
	norm := func(h string) string {
		return strings.TrimSuffix(strings.TrimSuffix(strings.ToLower(h), ":80"), ".")
	}
	return norm(a) == norm(b)
}

// hostName normalizes a Host or SNI value: port dropped, lower case, no
// trailing dot; "" for an address literal.
func hostName(h string) string {
	if host, _, err := net.SplitHostPort(h); err == nil {
		h = host
	}
	h = strings.Trim(h, "[]")
	if _, err := netip.ParseAddr(h); err == nil {
		return ""
	}
	if validName(normName(h)) != nil {
		return ""
	}
	return normName(h)
}

var errNotHello = errors.New("not a TLS ClientHello")

// tlsClientHello gathers the first handshake message from the TLS records in
// buf. done is false while more bytes are needed.
func tlsClientHello(buf []byte) (hello []byte, done bool, err error) {
	var hs []byte
	for {
		if len(buf) < 5 {
			return nil, false, nil
		}
		if buf[0] != 0x16 || buf[1] != 3 {
			return nil, false, errNotHello
		}
		n := int(buf[3])<<8 | int(buf[4])
		if n == 0 || n > 1<<14 {
			return nil, false, errNotHello
		}
		if len(buf) < 5+n {
			return nil, false, nil
		}
		hs = append(hs, buf[5:5+n]...)
		buf = buf[5+n:]
		if len(hs) < 4 {
			continue
		}
		if hs[0] != 1 { // client_hello
			return nil, false, errNotHello
		}
		m := int(hs[1])<<16 | int(hs[2])<<8 | int(hs[3])
		if 4+m > maxSniff {
			return nil, false, errNotHello
		}
		if len(hs) >= 4+m {
			return hs[4 : 4+m], true, nil
		}
	}
}

// serverName returns the server_name extension of a ClientHello body, or "".
func serverName(hello []byte) string {
	r := byteReader(hello)
	r.skip(2 + 32) // version, random
	r.skip(int(r.u8()))
	r.skip(int(r.u16()))
	r.skip(int(r.u8()))
	exts := byteReader(r.bytes(int(r.u16())))
	for len(exts) >= 4 {
		typ := exts.u16()
		data := byteReader(exts.bytes(int(exts.u16())))
		if typ != 0 { // server_name
			continue
		}
		list := byteReader(data.bytes(int(data.u16())))
		for len(list) >= 3 {
			kind := list.u8()
			name := list.bytes(int(list.u16()))
			if kind == 0 { // host_name
				return string(name)
			}
		}
		return ""
	}
	return ""
}

// byteReader reads big-endian fields; reading past the end empties it and
// yields zeros, so a malformed message simply has no name.
type byteReader []byte

func (r *byteReader) bytes(n int) []byte {
	if n > len(*r) {
		*r = nil
		return nil
	}
	b := (*r)[:n]
	*r = (*r)[n:]
	return b
}

func (r *byteReader) skip(n int) { r.bytes(n) }

func (r *byteReader) u8() uint8 {
	b := r.bytes(1)
	if b == nil {
		return 0
	}
	return b[0]
}

func (r *byteReader) u16() uint16 {
	b := r.bytes(2)
	if b == nil {
		return 0
	}
	return uint16(b[0])<<8 | uint16(b[1])
}
