package nodeapi

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/node"
)

// EncodeArgs is a streaming call's arguments as ArgsHeader carries them.
func EncodeArgs(v any) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// DecodeArgs reads a value EncodeArgs wrote.
func DecodeArgs(s string, v any) error {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

func args(r *http.Request) (Call, error) {
	var c Call
	if err := DecodeArgs(r.Header.Get(ArgsHeader), &c); err != nil {
		return c, api.Errorf(api.CodeInvalidArgument, "the call's arguments are not readable: %v", err)
	}
	return c, nil
}

func (s *Server) handleStdin(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	err := s.n.Stdin(r.Context(), q.Get("sandbox"), q.Get("command"), r.Body, q.Get("eof") == "true")
	if err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) handleWriteFile(w http.ResponseWriter, r *http.Request) {
	c, err := args(r)
	if err != nil {
		writeError(w, err)
		return
	}
	a, err := need(c.Write, "write")
	if err != nil {
		writeError(w, err)
		return
	}
	spec := node.WriteSpec{
		Path: a.Path, UID: a.UID, GID: a.GID, Chown: a.Chown, Mode: a.Mode,
		IfMatch: a.IfMatch, IfNoneMatch: a.IfNoneMatch, SHA256: a.SHA256, Size: a.Size, Xattrs: a.Xattrs,
	}
	if a.Trailer {
		// The trailer is there once the body was read to its end.
		spec.Trailer = func() (string, error) { return r.Trailer.Get(DigestTrailer), nil }
	}
	entry, created, err := s.n.WriteFile(r.Context(), c.Sandbox, spec, r.Body)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, Written{Entry: entry, Created: created})
}

func (s *Server) handleWriteArchive(w http.ResponseWriter, r *http.Request) {
	c, err := args(r)
	if err != nil {
		writeError(w, err)
		return
	}
	spec, err := need(c.Archive, "archive")
	if err != nil {
		writeError(w, err)
		return
	}
	res, err := s.n.WriteArchive(r.Context(), c.Sandbox, spec, r.Body)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, res)
}

func readArgs(w http.ResponseWriter, r *http.Request) (Call, bool) {
	var c Call
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxCall)).Decode(&c); err != nil {
		writeError(w, api.Errorf(api.CodeInvalidArgument, "the call's arguments are not JSON: %v", err))
		return c, false
	}
	return c, true
}

func (s *Server) handleReadFile(w http.ResponseWriter, r *http.Request) {
	c, ok := readArgs(w, r)
	if !ok {
		return
	}
	spec, err := need(c.Read, "read")
	if err != nil {
		writeError(w, err)
		return
	}
	content, err := s.n.ReadFile(r.Context(), c.Sandbox, spec)
	if err != nil {
		writeError(w, err)
		return
	}
	if content.Body != nil {
		defer content.Body.Close()
	}
	h, err := EncodeArgs(Content{
		Status: content.Status, ContentLength: content.ContentLength, ContentRange: content.ContentRange,
		ContentType: content.ContentType, ETag: content.ETag, ReprDigest: content.ReprDigest,
		LastModified: content.LastModified,
	})
	if err != nil {
		writeError(w, err)
		return
	}
	w.Header().Set(ContentHeader, h)
	w.Header().Set("Content-Type", "application/octet-stream")
	w.WriteHeader(http.StatusOK)
	if content.Body != nil {
		io.Copy(w, content.Body)
	}
}

func (s *Server) handleReadArchive(w http.ResponseWriter, r *http.Request) {
	c, ok := readArgs(w, r)
	if !ok {
		return
	}
	body, err := s.n.ReadArchive(r.Context(), c.Sandbox, c.Path)
	if err != nil {
		writeError(w, err)
		return
	}
	defer body.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.WriteHeader(http.StatusOK)
	if _, err := io.Copy(w, body); err != nil {
		// The reader sees the stream cut short, not a clean end.
		panic(http.ErrAbortHandler)
	}
}

func state(o node.Output) OutputState {
	out, errs := o.Sizes()
	return OutputState{LastSeq: o.LastSeq(), Stdout: out, Stderr: errs, Exit: o.Exit(), Ended: o.Ended()}
}

// handleOutputWatch streams an output's state, a line at each change,
// until the command ends or the reader goes.
func (s *Server) handleOutputWatch(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	o, err := s.n.Output(q.Get("sandbox"), q.Get("command"))
	if err != nil {
		writeError(w, err)
		return
	}
	defer o.Close()
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	enc := json.NewEncoder(w)
	for {
		changed := o.Changed()
		st := state(o)
		if enc.Encode(st) != nil || rc.Flush() != nil || st.Ended {
			return
		}
		select {
		case <-changed:
		case <-r.Context().Done():
			return
		case <-s.ctx.Done():
			return
		}
	}
}

// handleOutputRead streams an output's chunks after `after`, following
// when asked, and ends with a line that has the exit or the error.
func (s *Server) handleOutputRead(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	after, _ := strconv.ParseInt(q.Get("after"), 10, 64)
	o, err := s.n.Output(q.Get("sandbox"), q.Get("command"))
	if err != nil {
		writeError(w, err)
		return
	}
	defer o.Close()
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	enc := json.NewEncoder(w)
	// A follow ends when the server closes (the node shuts down), not
	// only with the request: the control plane resumes it after the last
	// chunk it got, and the node's shutdown does not wait for it.
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	defer context.AfterFunc(s.ctx, cancel)()
	exit, err := o.Read(ctx, after, q.Get("follow") == "true", func(c node.Chunk) error {
		if err := enc.Encode(OutputLine{Chunk: &c}); err != nil {
			return err
		}
		return rc.Flush()
	})
	last := OutputLine{Done: true, Exit: exit}
	if err != nil {
		if ctx.Err() != nil {
			return
		}
		last = OutputLine{Done: true, Error: wireError(err)}
	}
	enc.Encode(last)
}

// handleOutputStream serves a range of an output's raw stream, its size
// in SizeHeader.
func (s *Server) handleOutputStream(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	o, err := s.n.Output(q.Get("sandbox"), q.Get("command"))
	if err != nil {
		writeError(w, err)
		return
	}
	defer o.Close()
	ra, size, err := o.Stream(q.Get("name"))
	if err != nil {
		writeError(w, err)
		return
	}
	off, _ := strconv.ParseInt(q.Get("off"), 10, 64)
	n, _ := strconv.ParseInt(q.Get("n"), 10, 64)
	if off < 0 || n < 0 {
		writeError(w, api.Errorf(api.CodeInvalidArgument, "a range is off ≥ 0 and n ≥ 0"))
		return
	}
	w.Header().Set(SizeHeader, strconv.FormatInt(size, 10))
	w.Header().Set("Content-Type", "application/octet-stream")
	w.WriteHeader(http.StatusOK)
	if off < size {
		io.Copy(w, io.NewSectionReader(ra, off, min(n, size-off)))
	}
}

// handleDial connects to a sandbox's port and turns the request's
// connection (HTTP/1.1, Upgrade: cove-tunnel) into a raw tunnel to it.
func (s *Server) handleDial(w http.ResponseWriter, r *http.Request) {
	if r.ProtoMajor != 1 || r.Header.Get("Upgrade") != TunnelProtocol {
		writeError(w, api.Errorf(api.CodeInvalidArgument, "a tunnel is an HTTP/1.1 Upgrade to %s", TunnelProtocol))
		return
	}
	q := r.URL.Query()
	port, err := strconv.Atoi(q.Get("port"))
	if err != nil {
		writeError(w, api.Errorf(api.CodeInvalidArgument, "port must be a number"))
		return
	}
	up, err := s.n.DialPort(r.Context(), q.Get("sandbox"), port)
	if err != nil {
		writeError(w, err)
		return
	}
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		up.Close()
		writeError(w, err)
		return
	}
	brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: " + TunnelProtocol + "\r\nConnection: Upgrade\r\n\r\n")
	if err := brw.Flush(); err != nil {
		conn.Close()
		up.Close()
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.pipe(conn, brw.Reader, up)
	}()
}

// pipe copies both ways until either side ends or the server closes.
func (s *Server) pipe(down net.Conn, downR *bufio.Reader, up net.Conn) {
	var once sync.Once
	end := func() { once.Do(func() { down.Close(); up.Close() }) }
	stop := context.AfterFunc(s.ctx, end)
	defer stop()
	done := make(chan struct{})
	go func() {
		io.Copy(up, downR)
		closeWrite(up)
		close(done)
	}()
	io.Copy(down, up)
	closeWrite(down)
	<-done
	end()
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
		return
	}
	c.Close()
}
