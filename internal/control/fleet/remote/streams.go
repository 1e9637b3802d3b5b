package remote

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/node"
	"github.com/cove-dev/cove/internal/node/nodeapi"
)

// Stdin streams input to a command.
func (c *Client) Stdin(ctx context.Context, sandboxID, commandID string, r io.Reader, eof bool) error {
	q := url.Values{"sandbox": {sandboxID}, "command": {commandID}, "eof": {strconv.FormatBool(eof)}}
	resp, err := c.do(ctx, request{method: http.MethodPost, path: "stdin", query: q, stream: nonNil(r), op: true})
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// nonNil is r, or an empty body for none (the request's body is then a
// stream, never resent).
func nonNil(r io.Reader) io.Reader {
	if r == nil {
		return http.NoBody
	}
	return r
}

// trailerBody is an upload whose digest, known only at its end, follows
// it as a trailer.
type trailerBody struct {
	r       io.Reader
	trailer http.Header
	digest  func() (string, error)
}

func (t *trailerBody) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	if err == io.EOF {
		d, derr := t.digest()
		if derr != nil {
			return n, derr
		}
		t.trailer.Set(nodeapi.DigestTrailer, d)
	}
	return n, err
}

// WriteFile streams a file's new content to the node.
func (c *Client) WriteFile(ctx context.Context, sandboxID string, spec node.WriteSpec, body io.Reader) (api.FileEntry, bool, error) {
	a := nodeapi.WriteArgs{
		Path: spec.Path, UID: spec.UID, GID: spec.GID, Chown: spec.Chown, Mode: spec.Mode,
		IfMatch: spec.IfMatch, IfNoneMatch: spec.IfNoneMatch, SHA256: spec.SHA256,
		Trailer: spec.Trailer != nil, Size: spec.Size, Xattrs: spec.Xattrs,
	}
	h, err := nodeapi.EncodeArgs(nodeapi.Call{Sandbox: sandboxID, Write: &a})
	if err != nil {
		return api.FileEntry{}, false, err
	}
	stream := nonNil(body)
	var tb *trailerBody
	if spec.Trailer != nil {
		tb = &trailerBody{r: stream, trailer: http.Header{nodeapi.DigestTrailer: nil}, digest: spec.Trailer}
		stream = tb
	}
	rq := request{method: http.MethodPost, path: "write-file", header: http.Header{nodeapi.ArgsHeader: {h}}, stream: stream, op: true}
	resp, err := c.do(ctx, rq)
	if err != nil {
		return api.FileEntry{}, false, err
	}
	defer resp.Body.Close()
	var out nodeapi.Written
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return api.FileEntry{}, false, c.transportErr(ctx, err)
	}
	return out.Entry, out.Created, nil
}

// WriteArchive streams a tar or tar.gz to extract into a folder.
func (c *Client) WriteArchive(ctx context.Context, sandboxID string, spec node.ArchiveSpec, body io.Reader) (api.ArchiveResult, error) {
	h, err := nodeapi.EncodeArgs(nodeapi.Call{Sandbox: sandboxID, Archive: &spec})
	if err != nil {
		return api.ArchiveResult{}, err
	}
	rq := request{method: http.MethodPost, path: "write-archive", header: http.Header{nodeapi.ArgsHeader: {h}}, stream: nonNil(body), op: true}
	resp, err := c.do(ctx, rq)
	if err != nil {
		return api.ArchiveResult{}, err
	}
	defer resp.Body.Close()
	var out api.ArchiveResult
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return api.ArchiveResult{}, c.transportErr(ctx, err)
	}
	return out, nil
}

// ReadFile streams a file's content from the node; the caller closes the
// body.
func (c *Client) ReadFile(ctx context.Context, sandboxID string, spec node.ReadSpec) (*node.Content, error) {
	b, err := json.Marshal(nodeapi.Call{Sandbox: sandboxID, Read: &spec})
	if err != nil {
		return nil, err
	}
	resp, err := c.do(ctx, request{method: http.MethodPost, path: "read-file", json: b})
	if err != nil {
		return nil, err
	}
	var h nodeapi.Content
	if err := nodeapi.DecodeArgs(resp.Header.Get(nodeapi.ContentHeader), &h); err != nil {
		resp.Body.Close()
		return nil, c.unavailable(err)
	}
	return &node.Content{
		Status: h.Status, ContentLength: h.ContentLength, ContentRange: h.ContentRange,
		ContentType: h.ContentType, ETag: h.ETag, ReprDigest: h.ReprDigest, LastModified: h.LastModified,
		Body: resp.Body,
	}, nil
}

// ReadArchive streams a folder as an archive from the node; the caller
// closes it. A stream the node cut short ends with an error, not EOF.
func (c *Client) ReadArchive(ctx context.Context, sandboxID, path string) (io.ReadCloser, error) {
	b, err := json.Marshal(nodeapi.Call{Sandbox: sandboxID, Path: path})
	if err != nil {
		return nil, err
	}
	resp, err := c.do(ctx, request{method: http.MethodPost, path: "read-archive", json: b})
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// DialPort opens a raw tunnel to a published port of a running sandbox:
// a connection of its own to the node, upgraded from HTTP/1.1.
func (c *Client) DialPort(ctx context.Context, sandboxID string, port int) (net.Conn, error) {
	conf := c.cfg.TLS.Clone()
	conf.NextProtos = []string{"http/1.1"}
	d := tls.Dialer{NetDialer: &net.Dialer{Timeout: DialTimeout}, Config: conf}
	dctx, cancel := context.WithTimeout(ctx, DialTimeout)
	conn, err := d.DialContext(dctx, "tcp", c.cfg.Addr)
	cancel()
	if err != nil {
		return nil, c.transportErr(ctx, err)
	}
	q := url.Values{"sandbox": {sandboxID}, "port": {strconv.Itoa(port)}}
	req, err := http.NewRequest(http.MethodGet, "https://"+c.cfg.Addr+nodeapi.Prefix+"dial?"+q.Encode(), nil)
	if err != nil {
		conn.Close()
		return nil, err
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", nodeapi.TunnelProtocol)
	// The node answers once it reached the port, or fails; the context
	// bounds the wait.
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Now()) })
	defer stop()
	conn.SetDeadline(time.Now().Add(UpgradeTimeout))
	br := bufio.NewReader(conn)
	if err := req.Write(conn); err != nil {
		conn.Close()
		return nil, c.transportErr(ctx, err)
	}
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		conn.Close()
		return nil, c.transportErr(ctx, err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		defer conn.Close()
		defer resp.Body.Close()
		return nil, c.answerErr(resp)
	}
	if !stop() {
		conn.Close()
		return nil, ctx.Err()
	}
	conn.SetDeadline(time.Time{})
	return &tunnel{Conn: conn, r: br}, nil
}

// tunnel is the upgraded connection; what the node sent after its answer
// may wait in r.
type tunnel struct {
	net.Conn
	r *bufio.Reader
}

func (t *tunnel) Read(p []byte) (int, error) { return t.r.Read(p) }

// CloseWrite ends what the caller sends, keeping what it receives.
func (t *tunnel) CloseWrite() error { return t.Conn.(*tls.Conn).CloseWrite() }
