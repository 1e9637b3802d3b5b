package cove

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/cove-dev/cove/api"
)

// ErrDigestMismatch says downloaded bytes differ from the Repr-Digest the
// server announced: the download must not be used.
var ErrDigestMismatch = errors.New("downloaded bytes do not match the server's Repr-Digest")

// FileOption adjusts a file call.
type FileOption func(*fileOptions)

type fileOptions struct {
	noWake      bool
	user        string
	mode        string
	ifMatch     string
	ifNoneMatch bool
	byteRange   string
	recursive   bool
	overwrite   bool
}

// NoWake makes a file call on an asleep sandbox fail (409) instead of
// waking it.
func NoWake() FileOption { return func(o *fileOptions) { o.noWake = true } }

// AsUser writes files as "user" (the default) or "root".
func AsUser(user string) FileOption { return func(o *fileOptions) { o.user = user } }

// WithMode sets the permission bits of a written file, in octal ("0755").
func WithMode(mode string) FileOption { return func(o *fileOptions) { o.mode = mode } }

// IfMatch makes a write fail with precondition_failed unless the file's
// version is still v.
func IfMatch(v string) FileOption { return func(o *fileOptions) { o.ifMatch = v } }

// IfNoneMatch makes a write fail with precondition_failed if the file
// exists.
func IfNoneMatch() FileOption { return func(o *fileOptions) { o.ifNoneMatch = true } }

// ByteRange reads only bytes from first to last inclusive (last < 0: to
// the end). The digest of a part cannot be checked.
func ByteRange(first, last int64) FileOption {
	return func(o *fileOptions) {
		o.byteRange = fmt.Sprintf("bytes=%d-", first)
		if last >= 0 {
			o.byteRange += strconv.FormatInt(last, 10)
		}
	}
}

// Recursive removes a directory with everything in it.
func Recursive() FileOption { return func(o *fileOptions) { o.recursive = true } }

// Overwrite lets a move replace what is at its destination.
func Overwrite() FileOption { return func(o *fileOptions) { o.overwrite = true } }

func fileOpts(opts []FileOption) fileOptions {
	var o fileOptions
	for _, f := range opts {
		f(&o)
	}
	return o
}

func (o fileOptions) query(path string) url.Values {
	q := url.Values{}
	if path != "" {
		q.Set("path", path)
	}
	if o.noWake {
		q.Set("wake", "false")
	}
	if o.user != "" {
		q.Set("user", o.user)
	}
	return q
}

func filesPath(ref, what string) string {
	p := sandboxPath(ref) + "/files"
	if what != "" {
		p += "/" + what
	}
	return p
}

// newRequest builds a request; roundTrip adds the credentials.
func (c *Client) newRequest(ctx context.Context, method, path string, q url.Values, body io.Reader) (*http.Request, error) {
	u := c.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, &Error{Code: api.CodeInvalidArgument, Message: err.Error(), Err: err}
	}
	return req, nil
}

// doRequest sends req and returns a 2xx answer, else an *Error. It adds
// an Idempotency-Key where the API takes one.
func (c *Client) doRequest(req *http.Request) (*http.Response, error) {
	return c.roundTrip(req, takesKey(req.Method, req.URL.Path, false))
}

func decodeJSON(resp *http.Response, out any) error {
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return &Error{Code: api.CodeUnavailable, Message: "decode answer: " + err.Error(), Status: resp.StatusCode, Err: err}
	}
	return nil
}

// ListFiles returns a page of the entries under dir, to depth levels (1:
// its own entries). Pass the page's NextCursor as cursor for the next.
func (c *Client) ListFiles(ctx context.Context, ref, dir string, depth, limit int, cursor string, opts ...FileOption) (api.List[api.FileEntry], error) {
	q := fileOpts(opts).query(dir)
	if depth > 0 {
		q.Set("depth", strconv.Itoa(depth))
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	var out api.List[api.FileEntry]
	err := c.do(ctx, http.MethodGet, filesPath(ref, ""), q, nil, &out)
	return out, err
}

// StatFile describes one file (a symlink is itself).
func (c *Client) StatFile(ctx context.Context, ref, path string, opts ...FileOption) (api.FileEntry, error) {
	var e api.FileEntry
	err := c.do(ctx, http.MethodGet, filesPath(ref, "stat"), fileOpts(opts).query(path), nil, &e)
	return e, err
}

// FileReader is a file's content as it downloads. Read checks the bytes
// against the server's Repr-Digest at the end: a mismatch (or a short
// body) is an error there, never a silent success.
type FileReader struct {
	// Version is the file's version (its ETag without quotes).
	Version string
	// Size is the length of the body, or -1 when the server did not say.
	Size int64
	// Digest is the sha-256 of the whole file.
	Digest []byte
	// Partial is set for a ByteRange answer, whose digest is not checked.
	Partial bool

	body io.ReadCloser
	h    hash.Hash
	n    int64
	err  error
}

// Read reads the body, checking its length and digest at its end.
func (f *FileReader) Read(p []byte) (int, error) {
	if f.err != nil {
		return 0, f.err
	}
	n, err := f.body.Read(p)
	f.n += int64(n)
	if f.h != nil {
		f.h.Write(p[:n])
	}
	if err == io.EOF {
		switch {
		case f.Size >= 0 && f.n != f.Size:
			err = fmt.Errorf("download ended after %d of %d bytes: %w", f.n, f.Size, io.ErrUnexpectedEOF)
		case f.h != nil && !bytes.Equal(f.h.Sum(nil), f.Digest):
			err = ErrDigestMismatch
		}
	}
	if err != nil {
		f.err = err
	}
	return n, err
}

// Close ends the download.
func (f *FileReader) Close() error { return f.body.Close() }

// ReadFile opens a file's content for reading. The caller closes it and
// must read it to io.EOF for the digest to be checked.
func (c *Client) ReadFile(ctx context.Context, ref, path string, opts ...FileOption) (*FileReader, error) {
	o := fileOpts(opts)
	req, err := c.newRequest(ctx, http.MethodGet, filesPath(ref, "content"), o.query(path), nil)
	if err != nil {
		return nil, err
	}
	if o.byteRange != "" {
		req.Header.Set("Range", o.byteRange)
	}
	resp, err := c.doRequest(req)
	if err != nil {
		return nil, err
	}
	f := &FileReader{Size: resp.ContentLength, body: resp.Body, Partial: resp.StatusCode == http.StatusPartialContent}
	f.Version = strings.Trim(resp.Header.Get("ETag"), `"`)
	if f.Digest, err = api.ParseReprDigest(resp.Header.Get("Repr-Digest")); err != nil || f.Digest == nil {
		resp.Body.Close()
		return nil, fmt.Errorf("download of %s has no valid sha-256 Repr-Digest (%v); refusing unchecked bytes", path, err)
	}
	if !f.Partial {
		f.h = sha256.New()
	}
	return f, nil
}

// DownloadFile copies a file's content to w and returns its version. It
// fails with ErrDigestMismatch when the bytes are not what the server
// announced; w has then received them, so callers writing a file remove it.
func (c *Client) DownloadFile(ctx context.Context, ref, path string, w io.Writer, opts ...FileOption) (*FileReader, error) {
	f, err := c.ReadFile(ctx, ref, path, opts...)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if _, err := io.CopyBuffer(w, f, make([]byte, 256<<10)); err != nil {
		return nil, err
	}
	return f, nil
}

// WriteFile uploads r as the file's new content. The server writes it
// atomically (the old content stays if anything fails). The SDK hashes the
// bytes as it sends them and sends the sha-256 as a Repr-Digest trailer,
// so the sandbox checks that it stored exactly what was read from r.
func (c *Client) WriteFile(ctx context.Context, ref, path string, r io.Reader, opts ...FileOption) (api.FileEntry, error) {
	o := fileOpts(opts)
	q := o.query(path)
	if o.mode != "" {
		q.Set("mode", o.mode)
	}
	if r == nil {
		r = bytes.NewReader(nil)
	}
	req, err := c.newRequest(ctx, http.MethodPut, filesPath(ref, "content"), q, nil)
	if err != nil {
		return api.FileEntry{}, err
	}
	setDigestBody(req, r)
	req.Header.Set("Content-Type", "application/octet-stream")
	if o.ifMatch != "" {
		req.Header.Set("If-Match", `"`+o.ifMatch+`"`)
	}
	if o.ifNoneMatch {
		req.Header.Set("If-None-Match", "*")
	}
	resp, err := c.doRequest(req)
	if err != nil {
		return api.FileEntry{}, err
	}
	var e api.FileEntry
	return e, decodeJSON(resp, &e)
}

// setDigestBody makes r req's body, sent in chunks with its sha-256 as a
// Repr-Digest trailer. When r can be read again from where it stands (an
// io.ReaderAt and io.Seeker, as *os.File, *bytes.Reader and
// *strings.Reader are), req gets a GetBody that reads it from there, so
// the request is retried like one with bytes; each try reads through a
// reader of its own, since the transport may still be reading the last
// try's body when it returns. Any other reader is sent once.
func setDigestBody(req *http.Request, r io.Reader) {
	if r == nil {
		r = bytes.NewReader(nil)
	}
	open := func(r io.Reader) io.ReadCloser {
		h := sha256.New()
		return &digestBody{r: r, h: h, req: req}
	}
	req.Trailer = http.Header{"Repr-Digest": nil}
	req.ContentLength = -1 // trailers need chunks
	ra, isReaderAt := r.(io.ReaderAt)
	s, isSeeker := r.(io.Seeker)
	if !isReaderAt || !isSeeker {
		req.Body = open(r)
		return
	}
	start, err := s.Seek(0, io.SeekCurrent)
	if err != nil {
		req.Body = open(r)
		return
	}
	from := func() io.Reader { return io.NewSectionReader(ra, start, math.MaxInt64-start) }
	req.Body = open(from())
	req.GetBody = func() (io.ReadCloser, error) { return open(from()), nil }
}

// digestBody hashes the body as it is read and fills the request's
// Repr-Digest trailer when it ends.
type digestBody struct {
	r   io.Reader
	h   hash.Hash
	req *http.Request
}

func (b *digestBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.h.Write(p[:n])
	if err == io.EOF {
		b.end()
	}
	return n, err
}

func (b *digestBody) end() {
	b.req.Trailer.Set("Repr-Digest", api.FormatReprDigest(b.h.Sum(nil)))
}

// uploadChunk is the size of the chunks an upload is sent in. The
// transport copies a body that is not an io.WriterTo through 32 KiB
// reads, one chunk (and, on the way to the sandbox, one write and one
// read system call on each hop) per 32 KiB.
const uploadChunk = 1 << 20

// hashAhead is how many chunks may be read and sent while the hash is
// behind.
const hashAhead = 3

// WriteTo sends the body in chunks of up to uploadChunk bytes: the
// transport uses it instead of its 32 KiB copy. Each chunk is hashed by a
// goroutine of its own while it is sent and the next ones are read, so
// the sha-256 costs the upload little time where a second core is free;
// the trailer is set once all of it is hashed.
func (b *digestBody) WriteTo(w io.Writer) (int64, error) {
	free := make(chan []byte, hashAhead)
	for range hashAhead {
		free <- make([]byte, uploadChunk)
	}
	todo := make(chan []byte, hashAhead)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for p := range todo {
			b.h.Write(p)
			free <- p[:cap(p)]
		}
	}()
	var n int64
	err := func() error {
		for {
			p := <-free
			m, rerr := b.r.Read(p)
			if m > 0 {
				wm, werr := w.Write(p[:m])
				if werr == nil && wm < m {
					werr = io.ErrShortWrite
				}
				n += int64(wm)
				todo <- p[:m]
				if werr != nil {
					return werr
				}
			} else {
				free <- p
			}
			if rerr == io.EOF {
				return nil
			}
			if rerr != nil {
				return rerr
			}
		}
	}()
	close(todo)
	<-done
	if err == nil {
		b.end()
	}
	return n, err
}

func (b *digestBody) Close() error { return nil }

// UploadFile uploads the local file at local.
func (c *Client) UploadFile(ctx context.Context, ref, path, local string, opts ...FileOption) (api.FileEntry, error) {
	f, err := os.Open(local)
	if err != nil {
		return api.FileEntry{}, err
	}
	defer f.Close()
	return c.WriteFile(ctx, ref, path, f, opts...)
}

// EditFile replaces, in turn, each edit's Old by its New; each must occur
// exactly once (else conflict, and nothing is written). IfMatch applies.
func (c *Client) EditFile(ctx context.Context, ref, path string, edits []api.FileEdit, opts ...FileOption) (api.FileEntry, error) {
	o := fileOpts(opts)
	b, err := json.Marshal(api.EditFileRequest{Edits: edits})
	if err != nil {
		return api.FileEntry{}, err
	}
	req, err := c.newRequest(ctx, http.MethodPatch, filesPath(ref, "content"), o.query(path), bytes.NewReader(b))
	if err != nil {
		return api.FileEntry{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	if o.ifMatch != "" {
		req.Header.Set("If-Match", `"`+o.ifMatch+`"`)
	}
	resp, err := c.doRequest(req)
	if err != nil {
		return api.FileEntry{}, err
	}
	var e api.FileEntry
	return e, decodeJSON(resp, &e)
}

// Mkdir creates a directory and its missing parents.
func (c *Client) Mkdir(ctx context.Context, ref, path string, opts ...FileOption) (api.FileEntry, error) {
	var e api.FileEntry
	err := c.do(ctx, http.MethodPost, filesPath(ref, "mkdir"), fileOpts(opts).query(""), api.MkdirRequest{Path: path}, &e)
	return e, err
}

// MoveFile renames a file or directory; Overwrite lets it replace the
// destination.
func (c *Client) MoveFile(ctx context.Context, ref, from, to string, opts ...FileOption) (api.FileEntry, error) {
	o := fileOpts(opts)
	var e api.FileEntry
	err := c.do(ctx, http.MethodPost, filesPath(ref, "move"), o.query(""), api.MoveRequest{From: from, To: to, Overwrite: o.overwrite}, &e)
	return e, err
}

// RemoveFile removes a file, symlink or empty directory; with Recursive, a
// directory and everything in it.
func (c *Client) RemoveFile(ctx context.Context, ref, path string, opts ...FileOption) error {
	o := fileOpts(opts)
	q := o.query(path)
	if o.recursive {
		q.Set("recursive", "true")
		ctx = long(ctx) // the time grows with the tree
	}
	return c.do(ctx, http.MethodDelete, filesPath(ref, ""), q, nil, nil)
}

// ReadArchive opens a folder as a tar.gz stream. A stream that breaks
// before the end of the gzip data means the archive failed.
func (c *Client) ReadArchive(ctx context.Context, ref, dir string, opts ...FileOption) (io.ReadCloser, error) {
	req, err := c.newRequest(ctx, http.MethodGet, filesPath(ref, "archive"), fileOpts(opts).query(dir), nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.doRequest(req)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// WriteArchive extracts a tar or tar.gz stream into a folder (created if
// missing, merged otherwise). An entry that would leave the folder fails
// the whole archive before anything is written. The SDK sends the
// archive's sha-256 as a trailer: bytes changed on the way extract nothing.
func (c *Client) WriteArchive(ctx context.Context, ref, dir string, r io.Reader, opts ...FileOption) (api.ArchiveResult, error) {
	req, err := c.newRequest(ctx, http.MethodPut, filesPath(ref, "archive"), fileOpts(opts).query(dir), nil)
	if err != nil {
		return api.ArchiveResult{}, err
	}
	setDigestBody(req, r)
	req.Header.Set("Content-Type", "application/gzip")
	resp, err := c.doRequest(req)
	if err != nil {
		return api.ArchiveResult{}, err
	}
	var res api.ArchiveResult
	return res, decodeJSON(resp, &res)
}
