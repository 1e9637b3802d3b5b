package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/agent/wire"
	"github.com/cove-dev/cove/internal/fspath"
)

// StatFile describes the file at p (a symlink is itself).
func (c *Client) StatFile(ctx context.Context, p string) (wire.FileInfo, error) {
	var fi wire.FileInfo
	if err := c.call(ctx, http.MethodGet, "/v1/files/stat?"+url.Values{"path": {p}}.Encode(), nil, &fi); err != nil {
		return wire.FileInfo{}, fmt.Errorf("stat %s: %w", p, err)
	}
	if err := checkFileInfo(fi); err != nil {
		return wire.FileInfo{}, fmt.Errorf("stat %s: %w", p, err)
	}
	return fi, nil
}

// ListRequest asks for a page of a directory's entries.
type ListRequest struct {
	Path  string
	Depth int    // 1: the directory's own entries
	Limit int    // at most fspath.MaxListLimit
	After string // the Next of the page before
}

// ListFiles returns a page of entries under a directory, in walk order.
func (c *Client) ListFiles(ctx context.Context, req ListRequest) (wire.FileList, error) {
	q := url.Values{"path": {req.Path}}
	if req.Depth > 0 {
		q.Set("depth", strconv.Itoa(req.Depth))
	}
	if req.Limit > 0 {
		q.Set("limit", strconv.Itoa(req.Limit))
	}
	if req.After != "" {
		q.Set("after", req.After)
	}
	var l wire.FileList
	if err := c.call(ctx, http.MethodGet, "/v1/files/list?"+q.Encode(), nil, &l); err != nil {
		return wire.FileList{}, fmt.Errorf("list %s: %w", req.Path, err)
	}
	if len(l.Items) > fspath.MaxListLimit || (req.Limit > 0 && len(l.Items) > req.Limit) {
		return wire.FileList{}, fmt.Errorf("list %s: agent answered %d entries", req.Path, len(l.Items))
	}
	for _, fi := range l.Items {
		if err := checkFileInfo(fi); err != nil {
			return wire.FileList{}, fmt.Errorf("list %s: %w", req.Path, err)
		}
	}
	if l.Next != "" {
		if n, err := fspath.Clean(l.Next); err != nil || n != l.Next {
			return wire.FileList{}, fmt.Errorf("list %s: bad cursor from agent", req.Path)
		}
	}
	return l, nil
}

// FileContent is a download: its status (200, 206, 304 or 416), the
// headers that describe it, checked, and the body, which the caller closes.
type FileContent struct {
	Status int
	// Header holds only Content-Length, Content-Range, Content-Type,
	// ETag, Repr-Digest, Last-Modified and Accept-Ranges.
	Header http.Header
	Body   io.ReadCloser
}

// forwardedHeaders are the request headers of a download the agent sees.
var forwardedHeaders = []string{"Range", "If-Range", "If-None-Match", "If-Match", "If-Modified-Since", "If-Unmodified-Since"}

// ReadFile opens the content of the regular file at p. Conditional and
// range headers of h are passed on.
func (c *Client) ReadFile(ctx context.Context, p string, h http.Header) (*FileContent, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://agent/v1/files/content?"+url.Values{"path": {p}}.Encode(), nil)
	if err != nil {
		return nil, err
	}
	for _, k := range forwardedHeaders {
		if v := h.Values(k); len(v) > 0 {
			req.Header[k] = v
		}
	}
	resp, err := c.do(req, true)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", p, err)
	}
	switch resp.StatusCode {
	case http.StatusOK, http.StatusPartialContent, http.StatusNotModified, http.StatusRequestedRangeNotSatisfiable:
	case http.StatusPreconditionFailed:
		if !isJSON(resp) { // from http.ServeContent: If-Match on a download
			drain(resp)
			return nil, fmt.Errorf("read %s: %w", p, asError(wire.CodePreconditionFailed, fmt.Sprintf("%s does not match If-Match or If-Unmodified-Since", p)))
		}
		fallthrough
	default:
		defer drain(resp)
		return nil, fmt.Errorf("read %s: %w", p, readError(resp))
	}
	out := &FileContent{Status: resp.StatusCode, Header: http.Header{}, Body: resp.Body}
	if err := checkContentHeaders(resp.Header, out.Header); err != nil {
		resp.Body.Close()
		return nil, fmt.Errorf("read %s: %w", p, err)
	}
	return out, nil
}

// checkContentHeaders copies the headers of a download that the host
// passes on, refusing malformed ones.
func checkContentHeaders(in, out http.Header) error {
	if v := in.Get("ETag"); v != "" {
		if len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"' || !fspath.ValidVersion(v[1:len(v)-1]) {
			return fmt.Errorf("bad ETag %q from agent", v)
		}
		out.Set("ETag", v)
	}
	if v := in.Get("Repr-Digest"); v != "" {
		if _, err := api.ParseReprDigest(v); err != nil {
			return fmt.Errorf("bad Repr-Digest from agent: %w", err)
		}
		out.Set("Repr-Digest", v)
	}
	if v := in.Get("Content-Length"); v != "" {
		if n, err := strconv.ParseInt(v, 10, 64); err != nil || n < 0 {
			return fmt.Errorf("bad Content-Length %q from agent", v)
		}
		out.Set("Content-Length", v)
	}
	for _, k := range []string{"Content-Range", "Content-Type", "Last-Modified", "Accept-Ranges"} {
		if v := in.Get(k); v != "" {
			if len(v) > 256 || strings.ContainsAny(v, "\r\n") {
				return fmt.Errorf("bad %s from agent", k)
			}
			out.Set(k, v)
		}
	}
	return nil
}

// WriteRequest describes an upload.
type WriteRequest struct {
	Path        string
	UID, GID    int  // owner of a new file and of new parents
	Chown       bool // give an existing file UID:GID too (else it keeps its owner)
	Mode        int  // permission bits; -1 keeps the existing file's (0644 when new)
	IfMatch     []string
	IfNoneMatch bool
	SHA256      string // hex, when known before the body
	// TrailerSHA256, when not nil, is called once the body was read whole
	// and may return the hex digest known only then ("" for none). An
	// error fails the upload.
	TrailerSHA256 func() (string, error)
	// Size is the body's length when known, else -1.
	Size int64
	// Xattrs are the user.* extended attributes the new file gets (it
	// has no others); see fspath.CheckXattrs.
	Xattrs map[string]string
}

// WriteFile uploads body as the new content of a file, atomically. created
// says the file did not exist.
func (c *Client) WriteFile(ctx context.Context, req WriteRequest, body io.Reader) (fi wire.FileInfo, created bool, err error) {
	q := url.Values{"path": {req.Path}, "uid": {strconv.Itoa(req.UID)}, "gid": {strconv.Itoa(req.GID)}}
	if req.Chown {
		q.Set("chown", "true")
	}
	if req.Mode >= 0 {
		q.Set("mode", fmt.Sprintf("%04o", req.Mode))
	}
	for _, m := range req.IfMatch {
		q.Add("if_match", m)
	}
	if req.IfNoneMatch {
		q.Set("if_none_match", "true")
	}
	if req.SHA256 != "" {
		q.Set("sha256", req.SHA256)
	}
	if len(req.Xattrs) > 0 {
		if err := fspath.CheckXattrs(req.Xattrs); err != nil {
			return wire.FileInfo{}, false, fmt.Errorf("write %s: %w", req.Path, asError(wire.CodeInvalidArgument, err.Error()))
		}
		x, err := json.Marshal(req.Xattrs)
		if err != nil {
			return wire.FileInfo{}, false, err
		}
		q.Set("xattrs", string(x))
	}
	if body == nil {
		body = http.NoBody
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPut, "http://agent/v1/files/content?"+q.Encode(), nil)
	if err != nil {
		return wire.FileInfo{}, false, err
	}
	hreq.Header.Set("Content-Type", "application/octet-stream")
	if req.TrailerSHA256 != nil {
		hreq.Trailer = http.Header{wire.TrailerSHA256: nil}
		hreq.Body = &trailerBody{r: body, req: hreq, fn: req.TrailerSHA256}
		hreq.ContentLength = -1
	} else {
		hreq.Body = chunkedBody{body}
		hreq.ContentLength = req.Size
		if req.Size == 0 {
			hreq.Body = http.NoBody
		}
	}
	resp, err := c.do(hreq, true)
	if err != nil {
		return wire.FileInfo{}, false, fmt.Errorf("write %s: %w", req.Path, err)
	}
	defer drain(resp)
	if resp.StatusCode/100 != 2 {
		return wire.FileInfo{}, false, fmt.Errorf("write %s: %w", req.Path, readError(resp))
	}
	if err := decodeInfo(resp, &fi); err != nil {
		return wire.FileInfo{}, false, fmt.Errorf("write %s: %w", req.Path, err)
	}
	return fi, resp.StatusCode == http.StatusCreated, nil
}

// trailerBody fills the request's trailer when its body ends.
type trailerBody struct {
	r   io.Reader
	req *http.Request
	fn  func() (string, error)
}

func (b *trailerBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err == io.EOF {
		v, ferr := b.fn()
		if ferr != nil {
			return n, ferr
		}
		if v != "" {
			b.req.Trailer.Set(wire.TrailerSHA256, v)
		}
	}
	return n, err
}

// WriteTo sends the body in chunks of up to bodyChunk bytes: the
// transport uses it instead of its 32 KiB copy. Read sets the trailer.
func (b *trailerBody) WriteTo(w io.Writer) (int64, error) {
	return io.CopyBuffer(w, struct{ io.Reader }{b}, make([]byte, bodyChunk))
}

func (b *trailerBody) Close() error { return nil }

// chunkedBody is a body without a trailer, sent in chunks of up to
// bodyChunk bytes when its length is not known.
type chunkedBody struct{ io.Reader }

func (b chunkedBody) WriteTo(w io.Writer) (int64, error) {
	return io.CopyBuffer(w, struct{ io.Reader }{b.Reader}, make([]byte, bodyChunk))
}

func (chunkedBody) Close() error { return nil }

// bodyChunk is the size of the chunks an upload is sent to the agent in.
// The transport copies a body that is not an io.WriterTo through 32 KiB
// reads: a chunk, and a write and a read system call, per 32 KiB.
const bodyChunk = 1 << 20

// EditFile applies edits to a file (see wire.EditRequest).
func (c *Client) EditFile(ctx context.Context, req wire.EditRequest) (wire.FileInfo, error) {
	var fi wire.FileInfo
	if err := c.callWatched(ctx, http.MethodPost, "/v1/files/edit", req, &fi); err != nil {
		return wire.FileInfo{}, fmt.Errorf("edit %s: %w", req.Path, err)
	}
	if err := checkFileInfo(fi); err != nil {
		return wire.FileInfo{}, fmt.Errorf("edit %s: %w", req.Path, err)
	}
	return fi, nil
}

// Mkdir creates a directory and its missing parents.
func (c *Client) Mkdir(ctx context.Context, req wire.MkdirRequest) (wire.FileInfo, error) {
	var fi wire.FileInfo
	if err := c.call(ctx, http.MethodPost, "/v1/files/mkdir", req, &fi); err != nil {
		return wire.FileInfo{}, fmt.Errorf("mkdir %s: %w", req.Path, err)
	}
	if err := checkFileInfo(fi); err != nil {
		return wire.FileInfo{}, fmt.Errorf("mkdir %s: %w", req.Path, err)
	}
	return fi, nil
}

// MoveFile renames a file or directory.
func (c *Client) MoveFile(ctx context.Context, req wire.MoveRequest) (wire.FileInfo, error) {
	var fi wire.FileInfo
	if err := c.call(ctx, http.MethodPost, "/v1/files/move", req, &fi); err != nil {
		return wire.FileInfo{}, fmt.Errorf("move %s to %s: %w", req.From, req.To, err)
	}
	if err := checkFileInfo(fi); err != nil {
		return wire.FileInfo{}, fmt.Errorf("move %s: %w", req.From, err)
	}
	return fi, nil
}

// RemoveFile removes a file, a symlink or an empty directory; with
// recursive a directory and everything in it.
func (c *Client) RemoveFile(ctx context.Context, p string, recursive bool) error {
	q := url.Values{"path": {p}}
	if recursive {
		q.Set("recursive", "true")
	}
	if err := c.callWatched(ctx, http.MethodDelete, "/v1/files?"+q.Encode(), nil, nil); err != nil {
		return fmt.Errorf("remove %s: %w", p, err)
	}
	return nil
}

// ReadArchive opens a folder as a tar.gz stream, which the caller closes.
// A stream cut short means the archive failed.
func (c *Client) ReadArchive(ctx context.Context, p string) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://agent/v1/files/archive?"+url.Values{"path": {p}}.Encode(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.do(req, true)
	if err != nil {
		return nil, fmt.Errorf("archive %s: %w", p, err)
	}
	if resp.StatusCode != http.StatusOK {
		defer drain(resp)
		return nil, fmt.Errorf("archive %s: %w", p, readError(resp))
	}
	return resp.Body, nil
}

// WriteArchive extracts a tar or tar.gz into a folder, owned by uid:gid.
func (c *Client) WriteArchive(ctx context.Context, p string, uid, gid int, body io.Reader) (wire.ArchiveResult, error) {
	q := url.Values{"path": {p}, "uid": {strconv.Itoa(uid)}, "gid": {strconv.Itoa(gid)}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, "http://agent/v1/files/archive?"+q.Encode(), io.NopCloser(body))
	if err != nil {
		return wire.ArchiveResult{}, err
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := c.do(req, true)
	if err != nil {
		return wire.ArchiveResult{}, fmt.Errorf("extract into %s: %w", p, err)
	}
	defer drain(resp)
	if resp.StatusCode/100 != 2 {
		return wire.ArchiveResult{}, fmt.Errorf("extract into %s: %w", p, readError(resp))
	}
	var res wire.ArchiveResult
	if err := json.NewDecoder(io.LimitReader(resp.Body, wire.MaxJSON)).Decode(&res); err != nil {
		return wire.ArchiveResult{}, fmt.Errorf("extract into %s: decode answer: %w", p, err)
	}
	if res.Entries < 0 || res.Bytes < 0 {
		return wire.ArchiveResult{}, fmt.Errorf("extract into %s: bad answer %+v", p, res)
	}
	return res, nil
}

func decodeInfo(resp *http.Response, fi *wire.FileInfo) error {
	if err := json.NewDecoder(io.LimitReader(resp.Body, wire.MaxJSON)).Decode(fi); err != nil {
		return fmt.Errorf("decode answer: %w", err)
	}
	return checkFileInfo(*fi)
}

func isJSON(resp *http.Response) bool {
	return strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json")
}

// CheckFileInfo validates an entry from the (untrusted) agent.
func checkFileInfo(fi wire.FileInfo) error {
	switch {
	case fi.Type != wire.FileTypeFile && fi.Type != wire.FileTypeDir && fi.Type != wire.FileTypeSymlink && fi.Type != wire.FileTypeOther:
		return fmt.Errorf("bad file type %q from agent", fi.Type)
	case fi.Size < 0:
		return fmt.Errorf("bad file size %d from agent", fi.Size)
	case fi.Mode > 0o7777:
		return fmt.Errorf("bad file mode %o from agent", fi.Mode)
	case !fspath.ValidVersion(fi.Version):
		return fmt.Errorf("bad file version %q from agent", fi.Version)
	case fi.UID < 0 || fi.GID < 0:
		return fmt.Errorf("bad file owner %d:%d from agent", fi.UID, fi.GID)
	case len(fi.Name) > 255 || (strings.ContainsAny(fi.Name, "/\x00") && !(fi.Name == "/" && fi.Path == "/")):
		return fmt.Errorf("bad file name %q from agent", fi.Name)
	case len(fi.Target) > fspath.MaxPath || strings.IndexByte(fi.Target, 0) >= 0:
		return fmt.Errorf("bad symlink target from agent")
	}
	if err := fspath.CheckXattrs(fi.Xattrs); err != nil {
		return fmt.Errorf("bad extended attributes from agent: %w", err)
	}
	if p, err := fspath.Clean(fi.Path); err != nil || p != fi.Path {
		return fmt.Errorf("bad file path %q from agent", fi.Path)
	}
	return nil
}
