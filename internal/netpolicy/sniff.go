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
)

func (p protocol) String() string {
	switch p {
	case protoTLS:
		return "tls"
	case protoHTTP:
		return "http"
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
}

// sniff reads a client's first bytes: it waits up to first for them (so a
// server-speaks-first protocol is decided by address soon), then up to rest
// to complete a TLS ClientHello or an HTTP request header. What cannot be
// recognized in time is raw.
func sniff(c net.Conn, first, rest time.Duration) (sniffed, error) {
	buf := make([]byte, 0, 4096)
	if err := c.SetReadDeadline(time.Now().Add(first)); err != nil {
		return sniffed{}, err
	}
	defer c.SetReadDeadline(time.Time{})
	begun := false
	for {
		if s, more := classify(buf); !more {
			return s, nil
		}
		if len(buf) >= maxSniff {
			return sniffed{proto: protoRaw, buf: buf}, nil
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
				return sniffed{proto: protoRaw, buf: buf}, nil
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
	yes, maybe := httpMethod(buf)
	if maybe {
		return s, true
	}
	if !yes {
		return s, false
	}
	end := bytes.Index(buf, []byte("\r\n\r\n"))
	if end < 0 {
		return s, len(buf) < maxHTTPHeader
	}
	end += 4
	req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(buf[:end])))
	if err != nil {
		return s, false
	}
	s.proto, s.req, s.headerLen = protoHTTP, req, end
	s.name = hostName(req.Host)
	return s, false
}

var methods = [][]byte{
	[]byte("GET "), []byte("POST "), []byte("PUT "), []byte("HEAD "), []byte("DELETE "),
	[]byte("OPTIONS "), []byte("PATCH "), []byte("CONNECT "), []byte("TRACE "),
}

// httpMethod reports whether buf starts with an HTTP/1 method (yes) or with
// a prefix of one (maybe).
func httpMethod(buf []byte) (yes, maybe bool) {
	for _, m := range methods {
		if len(buf) >= len(m) {
			if bytes.HasPrefix(buf, m) {
				return true, false
			}
		} else if bytes.HasPrefix(m, buf) {
			maybe = true
		}
	}
	return false, maybe
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
