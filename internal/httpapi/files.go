package httpapi

import (
	"encoding/hex"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/files"
	"github.com/cove-dev/cove/internal/control/lifecycle"
	"github.com/cove-dev/cove/internal/fspath"
	"github.com/cove-dev/cove/internal/node"
)

// fileRoutes serve the files of a sandbox and their archives.
type fileRoutes struct {
	*shared
	Files        Files
	watchStreams *watchSlots
	// Sandboxes resolve a watched sandbox's name to its ID.
	Sandboxes Sandboxes
}

func (h fileRoutes) routes(auth authFunc) {
	auth("GET /v1/sandboxes/{ref}/files", h.listFiles)
	auth("DELETE /v1/sandboxes/{ref}/files", h.idempotent(h.removeFile))
	auth("GET /v1/sandboxes/{ref}/files/stat", h.statFile)
	auth("GET /v1/sandboxes/{ref}/files/content", h.readFile)
	auth("PUT /v1/sandboxes/{ref}/files/content", h.idempotentWith(h.writeFile, idempotency{upload: true, headers: fileEntryAnswer.headers}))
	auth("PATCH /v1/sandboxes/{ref}/files/content", h.idempotentWith(h.editFile, fileEntryAnswer))
	auth("POST /v1/sandboxes/{ref}/files/mkdir", h.idempotent(h.mkdirFile))
	auth("POST /v1/sandboxes/{ref}/files/move", h.idempotent(h.moveFile))
	auth("GET /v1/sandboxes/{ref}/files/archive", h.readArchive)
	auth("PUT /v1/sandboxes/{ref}/files/archive", h.idempotentUpload(h.writeArchive))
	auth("GET /v1/sandboxes/{ref}/files/watch", h.watchFiles)
}

// fileTarget reads the sandbox and ?wake= of a file call (wake defaults
// to true).
func fileTarget(r *http.Request, p lifecycle.Principal) (files.Target, error) {
	t := files.Target{TeamID: p.Team.ID, Ref: r.PathValue("ref")}
	var err error
	t.Wake, err = wakeQuery(r)
	return t, err
}

// wakeQuery reads the ?wake= of a live call (a file call, a command):
// true unless wake=false is given.
func wakeQuery(r *http.Request) (bool, error) {
	v := r.URL.Query().Get("wake")
	if v == "" {
		return true, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return true, api.Errorf(api.CodeInvalidArgument, "wake must be true or false")
	}
	return b, nil
}

// fileQuery checks the query's path the way every file call does: one
// value, present (an empty or relative one is refused further in).
func fileQuery(r *http.Request) (string, error) {
	vs := r.URL.Query()["path"]
	if len(vs) > 1 {
		return "", api.Errorf(api.CodeInvalidArgument, "path is given %d times; give it once", len(vs))
	}
	if len(vs) == 0 {
		return "", api.Errorf(api.CodeInvalidArgument, "path is missing; give ?path= with an absolute path inside the sandbox")
	}
	return vs[0], nil
}

// etags reads an If-Match field: "*" or a list of quoted versions. A weak
// tag never matches (If-Match compares strongly), so it is kept as it is
// and fails.
func etags(v string) []string {
	if strings.TrimSpace(v) == "" {
		return nil
	}
	var out []string
	for _, t := range strings.Split(v, ",") {
		t = strings.TrimSpace(t)
		if len(t) >= 2 && t[0] == '"' && t[len(t)-1] == '"' {
			t = t[1 : len(t)-1]
		}
		if t != "" {
			out = append(out, t)
		}
	}
	return out
}

func setEntryHeaders(w http.ResponseWriter, e api.FileEntry) {
	if e.Version != "" {
		w.Header().Set("ETag", `"`+e.Version+`"`)
	}
}

func (h fileRoutes) listFiles(w http.ResponseWriter, r *http.Request, p lifecycle.Principal) error {
	t, err := fileTarget(r, p)
	if err != nil {
		return err
	}
	path, err := fileQuery(r)
	if err != nil {
		return err
	}
	pg, err := paging(r)
	if err != nil {
		return err
	}
	if pg.Limit == 0 {
		pg.Limit = lifecycle.DefaultPageLimit
	}
	depth, err := queryInt(r, "depth", 1, 1, fspath.MaxListDepth)
	if err != nil {
		return err
	}
	out, err := h.Files.ListFiles(r.Context(), t, files.ListQuery{Path: path, Depth: int(depth), Limit: pg.Limit, Cursor: pg.Cursor})
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, out)
}

func (h fileRoutes) statFile(w http.ResponseWriter, r *http.Request, p lifecycle.Principal) error {
	t, err := fileTarget(r, p)
	if err != nil {
		return err
	}
	path, err := fileQuery(r)
	if err != nil {
		return err
	}
	e, err := h.Files.StatFile(r.Context(), t, path)
	if err != nil {
		return err
	}
	setEntryHeaders(w, e)
	return writeJSON(w, http.StatusOK, e)
}

// readFile streams a file's bytes from the agent, never holding them: the
// headers (ETag, Repr-Digest, Content-Length, Content-Range) come first,
// as the agent computed them.
func (h fileRoutes) readFile(w http.ResponseWriter, r *http.Request, p lifecycle.Principal) error {
	t, err := fileTarget(r, p)
	if err != nil {
		return err
	}
	path, err := fileQuery(r)
	if err != nil {
		return err
	}
	fc, err := h.Files.ReadFile(r.Context(), t, node.ReadSpec{
		Path: path, Range: r.Header.Get("Range"), IfRange: r.Header.Get("If-Range"),
		IfMatch: r.Header.Values("If-Match"), IfNoneMatch: r.Header.Values("If-None-Match"),
		IfModifiedSince: r.Header.Get("If-Modified-Since"), IfUnmodifiedSince: r.Header.Get("If-Unmodified-Since"),
	})
	if err != nil {
		return err
	}
	defer fc.Body.Close()
	setContentHeaders(w.Header(), fc)
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(fc.Status)
	if r.Method == http.MethodHead || fc.Status == http.StatusNotModified {
		return nil
	}
	if _, err := copyStream(w, fc.Body); err != nil {
		// Headers are out: cut the answer so the client sees it failed.
		h.log.Debug("file download cut short", "path", path, "err", err)
		panic(http.ErrAbortHandler)
	}
	return nil
}

// copyStream copies with a buffer of its own size; the response writer
// and the agent's body are both streams.
func copyStream(w io.Writer, r io.Reader) (int64, error) {
	buf := make([]byte, 256<<10)
	return io.CopyBuffer(w, r, buf)
}

// requestDigest returns the hex sha-256 of a Repr-Digest or Content-Digest
// field, or "" when there is none.
func requestDigest(hd http.Header) (string, error) {
	for _, k := range []string{"Repr-Digest", "Content-Digest"} {
		v := hd.Get(k)
		if v == "" {
			continue
		}
		sum, err := api.ParseReprDigest(v)
		if err != nil {
			return "", api.Errorf(api.CodeInvalidArgument, "%s: %v", k, err)
		}
		if sum != nil {
			return hex.EncodeToString(sum), nil
		}
	}
	return "", nil
}

func (h fileRoutes) writeFile(w http.ResponseWriter, r *http.Request, p lifecycle.Principal) error {
	t, err := fileTarget(r, p)
	if err != nil {
		return err
	}
	path, err := fileQuery(r)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	req := files.WriteRequest{
		Path: path, User: q.Get("user"), Mode: q.Get("mode"),
		IfMatch: etags(r.Header.Get("If-Match")), Size: r.ContentLength,
	}
	switch v := strings.TrimSpace(r.Header.Get("If-None-Match")); v {
	case "":
	case "*":
		req.IfNoneMatch = true
	default:
		return api.Errorf(api.CodeInvalidArgument, "If-None-Match on an upload must be *")
	}
	if req.SHA256, err = requestDigest(r.Header); err != nil {
		return err
	}
	// A digest may also come as a trailer, computed while the client sent
	// the body; it is read once the body ended.
	if _, ok := r.Trailer["Repr-Digest"]; ok {
		req.Trailer = func() (string, error) { return requestDigest(r.Trailer) }
	} else if _, ok := r.Trailer["Content-Digest"]; ok {
		req.Trailer = func() (string, error) { return requestDigest(r.Trailer) }
	}
	e, created, err := h.Files.WriteFile(r.Context(), t, req, r.Body)
	if err != nil {
		return err
	}
	setEntryHeaders(w, e)
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	return writeJSON(w, status, e)
}

func (h fileRoutes) editFile(w http.ResponseWriter, r *http.Request, p lifecycle.Principal) error {
	t, err := fileTarget(r, p)
	if err != nil {
		return err
	}
	path, err := fileQuery(r)
	if err != nil {
		return err
	}
	var req api.EditFileRequest
	if err := decode(r, &req, false); err != nil {
		return err
	}
	e, err := h.Files.EditFile(r.Context(), t, path, etags(r.Header.Get("If-Match")), req)
	if err != nil {
		return err
	}
	setEntryHeaders(w, e)
	return writeJSON(w, http.StatusOK, e)
}

func (h fileRoutes) mkdirFile(w http.ResponseWriter, r *http.Request, p lifecycle.Principal) error {
	t, err := fileTarget(r, p)
	if err != nil {
		return err
	}
	var req api.MkdirRequest
	if err := decode(r, &req, false); err != nil {
		return err
	}
	e, err := h.Files.Mkdir(r.Context(), t, req, r.URL.Query().Get("user"))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, e)
}

func (h fileRoutes) moveFile(w http.ResponseWriter, r *http.Request, p lifecycle.Principal) error {
	t, err := fileTarget(r, p)
	if err != nil {
		return err
	}
	var req api.MoveRequest
	if err := decode(r, &req, false); err != nil {
		return err
	}
	e, err := h.Files.MoveFile(r.Context(), t, req, r.URL.Query().Get("user"))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, e)
}

func (h fileRoutes) removeFile(w http.ResponseWriter, r *http.Request, p lifecycle.Principal) error {
	t, err := fileTarget(r, p)
	if err != nil {
		return err
	}
	path, err := fileQuery(r)
	if err != nil {
		return err
	}
	recursive, err := queryBool(r, "recursive")
	if err != nil {
		return err
	}
	if err := h.Files.RemoveFile(r.Context(), t, path, recursive); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (h fileRoutes) readArchive(w http.ResponseWriter, r *http.Request, p lifecycle.Principal) error {
	t, err := fileTarget(r, p)
	if err != nil {
		return err
	}
	path, err := fileQuery(r)
	if err != nil {
		return err
	}
	rc, err := h.Files.ReadArchive(r.Context(), t, path)
	if err != nil {
		return err
	}
	defer rc.Close()
	w.Header().Set("Content-Type", "application/gzip")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	if _, err := copyStream(w, rc); err != nil {
		h.log.Debug("archive download cut short", "path", path, "err", err)
		panic(http.ErrAbortHandler)
	}
	return nil
}

func (h fileRoutes) writeArchive(w http.ResponseWriter, r *http.Request, p lifecycle.Principal) error {
	t, err := fileTarget(r, p)
	if err != nil {
		return err
	}
	// path may be left out by a sandbox's source upload (its workdir).
	path := ""
	if _, ok := r.URL.Query()["path"]; ok {
		if path, err = fileQuery(r); err != nil {
			return err
		}
	}
	req := files.ArchiveUpload{Path: path, User: r.URL.Query().Get("user"), Size: r.ContentLength}
	if req.SHA256, err = requestDigest(r.Header); err != nil {
		return err
	}
	if _, ok := r.Trailer["Repr-Digest"]; ok {
		req.Trailer = func() (string, error) { return requestDigest(r.Trailer) }
	} else if _, ok := r.Trailer["Content-Digest"]; ok {
		req.Trailer = func() (string, error) { return requestDigest(r.Trailer) }
	}
	res, err := h.Files.WriteArchive(r.Context(), t, req, h.uploadBody(w, r))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, res)
}

// setContentHeaders describes a download as the node checked it.
func setContentHeaders(h http.Header, c *node.Content) {
	set := func(k, v string) {
		if v != "" {
			h.Set(k, v)
		}
	}
	if c.ContentLength >= 0 {
		h.Set("Content-Length", strconv.FormatInt(c.ContentLength, 10))
	}
	set("Content-Range", c.ContentRange)
	set("Content-Type", c.ContentType)
	set("ETag", c.ETag)
	set("Repr-Digest", c.ReprDigest)
	set("Last-Modified", c.LastModified)
	h.Set("Accept-Ranges", "bytes")
}
