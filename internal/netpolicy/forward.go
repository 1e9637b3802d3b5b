package netpolicy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Plain HTTP carries one request per connection through the gateway. The
// gateway decides a connection by its first request's Host; a second
// request on the same connection, kept alive or pipelined, could name any
// other host the destination serves (a CDN serves thousands). So the
// gateway forwards the first request alone, asking the server to close the
// connection after its response ("Connection: close"), and never forwards
// another byte the client sends on it: the client makes a new connection
// for its next request, and that one is decided on its own. A WebSocket
// handshake that the server accepts (101) turns the connection into
// WebSocket frames, which are relayed as they are.

// forwardHTTP forwards the sniffed request s from c to up, relays the
// response, and ends the client's connection when the server ends its
// own. ctx is the Serve lifecycle.
func (g *Gateway) forwardHTTP(ctx context.Context, c, up net.Conn, s sniffed, sb *sandbox, k obsKey) {
	stop := context.AfterFunc(ctx, func() { up.Close() })
	defer stop()
	defer up.Close()
	out := func(n int64) { g.reg.addBytes(sb, k, n, 0) }
	in := func(n int64) { g.reg.addBytes(sb, k, 0, n) }
	ws := isWebSocket(s.req)
	switched := make(chan bool, 1)
	l := &linger{idle: g.cfg.HalfClosedIdle}
	var wg sync.WaitGroup
	wg.Go(func() {
		left, err := sendRequest(up, c, closingHeader(s.buf[:s.headerLen], ws), s.buf[s.headerLen:], s.req, out)
		if err != nil {
			up.Close()
			return
		}
		if ws && <-switched {
			if len(left) > 0 {
				n, err := up.Write(left)
				out(int64(n))
				if err != nil {
					up.Close()
					return
				}
			}
			if pipe(up, c, out, l) {
				l.start(up)
			}
			return
		}
		awaitEnd(c, up, l)
	})
	if ws {
		ok := relayHead(c, up, in)
		switched <- ok
		if ok {
			if pipe(c, up, in, l) {
				l.start(c)
			}
			wg.Wait()
			return
		}
	}
	pipe(c, up, in, l)
	g.finish(c, up, &wg)
}

// awaitEnd reads and drops what the client sends after its request (none
// of it is forwarded) until the client ends its half; from then on the
// server must keep moving (l). A client that fails (resets) is gone: the
// server's response has no one to go to, so its connection is closed, or a
// server that never answers would hold both for good. finish stops
// awaitEnd by a read deadline, once up is closed already.
func awaitEnd(c, up net.Conn, l *linger) {
	if _, err := io.Copy(io.Discard, c); err == nil {
		l.start(up)
	} else {
		up.Close()
	}
}

// finish ends a one-request connection once the server's side is done:
// the request sender is stopped if it still reads the client, and the
// client is closed gently (its pipelined bytes drained, not answered with a
// reset that could cut the response short).
func (g *Gateway) finish(c, up net.Conn, wg *sync.WaitGroup) {
	up.Close()
	c.SetReadDeadline(time.Now())
	wg.Wait()
	closeGently(c)
}

// relayLate carries a connection that was allowed before its client said
// what it wants: a silent client decided by address (the server may speak
// first), a client whose first line is a bare word so far, or a CONNECT
// tunnel. The server's bytes flow at once. The client's bytes are sniffed
// until they show what they are, and must pass check: an HTTP request is
// then forwarded alone, as by forwardHTTP (a WebSocket handshake
// included: its Upgrade is dropped), anything else is spliced. A bare word
// goes on once the client pauses after it (a raw client waiting for an
// answer), but the bytes that would complete an HTTP request line after
// it never do: that connection is reset. first holds what the client sent
// already, none of it forwarded. ctx is the Serve lifecycle.
func (g *Gateway) relayLate(ctx context.Context, c, up net.Conn, first sniffed, sb *sandbox, k obsKey, check func(sniffed) bool) {
	stop := context.AfterFunc(ctx, func() { up.Close() })
	defer stop()
	defer up.Close()
	out := func(n int64) { g.reg.addBytes(sb, k, n, 0) }
	in := func(n int64) { g.reg.addBytes(sb, k, 0, n) }
	// Once the client has ended its half, the server must keep moving.
	l := &linger{idle: g.cfg.HalfClosedIdle}
	var down sync.WaitGroup
	down.Go(func() { pipe(c, up, in, l) })
	fail := func() {
		reset(c) // first: closing up ends the relay, which would close c gently
		up.Close()
		down.Wait()
	}
	send := func(b []byte) bool {
		n, err := up.Write(b)
		out(int64(n))
		if err != nil {
			fail()
		}
		return err == nil
	}
	endUp := func() {
		if cw, ok := up.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		}
		l.start(up)
		down.Wait()
	}

	// Read until the client's bytes settle what they are; a bare word it
	// pauses after (or ends with) goes on meanwhile.
	buf, sent, ended := first.buf, 0, first.ended
	paused := first.proto == protoBadHTTP && wordOnly(buf)
	var s sniffed
	for {
		if !paused && !ended {
			next, err := sniffFrom(c, buf, 0, g.cfg.HeaderTimeout)
			if err != nil {
				fail()
				return
			}
			buf, ended = next.buf, next.ended
			paused = next.proto == protoBadHTTP && wordOnly(buf)
			if !paused && !(ended && wordOnly(buf)) {
				s = next
				break
			}
		}
		if len(buf) == 0 { // ended without a word
			endUp()
			return
		}
		if len(buf) >= maxSniff { // a word too long to ever tell
			fail()
			return
		}
		if !wordOnly(buf) { // ended with more than a word
			s, _ = classify(buf)
			s.ended = true
			break
		}
		if !send(buf[sent:]) {
			return
		}
		sent = len(buf)
		if ended {
			endUp()
			return
		}
		paused = false
	}
	switch {
	case sent > 0 && (s.proto == protoHTTP || s.proto == protoBadHTTP):
		// A request line completed after its first word went on raw: as
		// refused as a malformed request (check observes it).
		check(sniffed{proto: protoBadHTTP, buf: s.buf, bad: "HTTP request line sent in pieces"})
		fail()
		return
	case !check(s):
		fail()
		return
	case s.proto == protoHTTP:
		var sender sync.WaitGroup
		sender.Go(func() {
			if _, err := sendRequest(up, c, closingHeader(s.buf[:s.headerLen], false), s.buf[s.headerLen:], s.req, out); err != nil {
				up.Close()
				return
			}
			awaitEnd(c, up, l)
		})
		down.Wait()
		g.finish(c, up, &sender)
		return
	}
	if !send(s.buf[sent:]) {
		return
	}
	if s.ended {
		endUp()
		return
	}
	if pipe(up, c, out, l) {
		l.start(up)
	}
	down.Wait()
}

// isWebSocket reports whether req asks to become a WebSocket.
func isWebSocket(req *http.Request) bool {
	return strings.EqualFold(strings.TrimSpace(req.Header.Get("Upgrade")), "websocket") && hasToken(req.Header.Values("Connection"), "upgrade")
}

func hasToken(values []string, token string) bool {
	for _, v := range values {
		for t := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// closingHeader returns a request header (as sent, CRLF line ends, checked
// by classify) that asks the server to close the connection after its
// response: its Connection, Keep-Alive and Proxy-Connection lines replaced
// by "Connection: close" ("Connection: Upgrade, close" for a WebSocket
// handshake, ws), and other upgrades (h2c, which would carry many requests
// on one connection) dropped with their HTTP2-Settings.
func closingHeader(header []byte, ws bool) []byte {
	lines := bytes.Split(bytes.TrimSuffix(header, []byte("\r\n\r\n")), []byte("\r\n"))
	out := make([]byte, 0, len(header)+32)
	out = append(out, lines[0]...)
	out = append(out, "\r\n"...)
	for _, l := range lines[1:] {
		name, _, _ := bytes.Cut(l, []byte(":"))
		switch strings.ToLower(string(name)) {
		case "connection", "keep-alive", "proxy-connection":
			continue
		case "upgrade", "http2-settings":
			if !ws {
				continue
			}
		}
		out = append(out, l...)
		out = append(out, "\r\n"...)
	}
	if ws {
		out = append(out, "Connection: Upgrade, close\r\n\r\n"...)
	} else {
		out = append(out, "Connection: close\r\n\r\n"...)
	}
	return out
}

// sendRequest writes header to up, then the request's body: from body (the
// bytes read after the header), then from c, exactly as long as the request
// says (Content-Length, or chunks up to the last one and its trailer). It
// returns what the client sent beyond the request. count counts bytes
// written.
func sendRequest(up, c net.Conn, header, body []byte, req *http.Request, count func(int64)) (left []byte, err error) {
	n, err := up.Write(header)
	count(int64(n))
	if err != nil {
		return nil, err
	}
	switch {
	case len(req.TransferEncoding) > 0: // chunked: classify let nothing else by
		br := bufio.NewReader(io.MultiReader(bytes.NewReader(body), c))
		cw := &countWriter{w: up, count: count}
		if err := copyChunked(cw, br); err != nil {
			return nil, err
		}
		left, _ = br.Peek(br.Buffered())
		return left, nil
	case req.ContentLength > 0:
		first := min(req.ContentLength, int64(len(body)))
		n, err := up.Write(body[:first])
		count(int64(n))
		if err != nil {
			return nil, err
		}
		// The rest straight from the socket.
		if err := copyN(up, c, req.ContentLength-first, count); err != nil {
			return nil, err
		}
		return body[first:], nil
	}
	return body, nil
}

type countWriter struct {
	w     io.Writer
	count func(int64)
}

func (w *countWriter) Write(p []byte) (int, error) {
	n, err := w.w.Write(p)
	w.count(int64(n))
	return n, err
}

const maxChunkLine = 4096

var errChunked = errors.New("malformed chunked body")

// copyChunked copies one chunked body from r to w byte for byte: chunks up
// to the last (size 0) and the trailer section after it. It is strict (hex
// sizes, CRLF line ends) so that it ends the body where any server would.
func copyChunked(w io.Writer, r *bufio.Reader) error {
	for {
		line, err := readCRLFLine(r)
		if err != nil {
			return err
		}
		sizeStr, _, _ := strings.Cut(string(line[:len(line)-2]), ";")
		size, err := strconv.ParseUint(sizeStr, 16, 63)
		if err != nil || sizeStr == "" || len(sizeStr) > 16 || strings.ContainsAny(sizeStr, "+-xX_") {
			return fmt.Errorf("%w: chunk size %q", errChunked, sizeStr)
		}
		if _, err := w.Write(line); err != nil {
			return err
		}
		if size == 0 {
			break
		}
		if _, err := io.CopyN(w, r, int64(size)); err != nil {
			return err
		}
		crlf := make([]byte, 2)
		if _, err := io.ReadFull(r, crlf); err != nil {
			return err
		}
		if string(crlf) != "\r\n" {
			return fmt.Errorf("%w: no CRLF after a chunk", errChunked)
		}
		if _, err := w.Write(crlf); err != nil {
			return err
		}
	}
	// Trailer fields, then an empty line.
	for range 128 {
		line, err := readCRLFLine(r)
		if err != nil {
			return err
		}
		if _, err := w.Write(line); err != nil {
			return err
		}
		if len(line) == 2 {
			return nil
		}
	}
	return fmt.Errorf("%w: too many trailer fields", errChunked)
}

// readCRLFLine reads one line ending in CRLF (returned with it); a bare CR
// or LF, or a line over maxChunkLine, is an error.
func readCRLFLine(r *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		b, err := r.ReadByte()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
		line = append(line, b)
		switch {
		case b == '\n':
			if len(line) < 2 || line[len(line)-2] != '\r' {
				return nil, fmt.Errorf("%w: bare LF", errChunked)
			}
			return line, nil
		case len(line) >= 2 && line[len(line)-2] == '\r':
			return nil, fmt.Errorf("%w: bare CR", errChunked)
		case len(line) > maxChunkLine:
			return nil, fmt.Errorf("%w: line too long", errChunked)
		}
	}
}

const maxResponseHead = 64 << 10

// relayHead reads the server's first response header from up, sends it and
// any bytes read with it to c, and reports whether it switched protocols
// (101). It is false when the header cannot be read whole.
func relayHead(c, up net.Conn, count func(int64)) bool {
	buf := make([]byte, 0, 4096)
	for {
		if i := bytes.Index(buf, []byte("\r\n\r\n")); i >= 0 {
			n, err := c.Write(buf)
			count(int64(n))
			if err != nil {
				return false
			}
			status := buf[:i]
			status, _, _ = bytes.Cut(status, []byte("\r\n"))
			f := strings.Fields(string(status))
			return len(f) >= 2 && strings.HasPrefix(f[0], "HTTP/1.") && f[1] == "101"
		}
		if len(buf) >= maxResponseHead {
			break
		}
		if len(buf) == cap(buf) {
			buf = append(buf, make([]byte, min(cap(buf), maxResponseHead-len(buf)))...)[:len(buf)]
		}
		n, err := up.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err != nil {
			break
		}
	}
	// What was read goes to the client as it is; the relay carries on.
	n, _ := c.Write(buf)
	count(int64(n))
	return false
}
