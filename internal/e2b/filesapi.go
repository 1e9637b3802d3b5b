package e2b

import (
	"compress/gzip"
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"path"
	"strconv"
	"strings"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/files"
	"github.com/cove-dev/cove/internal/fspath"
	"github.com/cove-dev/cove/internal/node"
)

// filesAPI serves envd's GET and POST /files: a file's raw bytes down and
// up, as the SDKs' files.read and files.write send them.
type filesAPI struct {
	files Files
	side  *SandboxSide
}

// fileUser is the user of a files request (username=, default user).
func fileUser(r *http.Request) (string, error) {
	switch u := r.URL.Query().Get("username"); u {
	case "", "user":
		return "user", nil
	case "root":
		return "root", nil
	default:
		return "", api.Errorf(api.CodeUnauthenticated, "user %q is unknown; cove's sandboxes have user and root", u)
	}
}

// uploadEntry is envd's answer for each file written.
type uploadEntry struct {
	Path     string            `json:"path"`
	Name     string            `json:"name"`
	Type     string            `json:"type"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

func (f *filesAPI) download(w http.ResponseWriter, r *http.Request) {
	err := func() error {
		user, err := fileUser(r)
		if err != nil {
			return err
		}
		p := absPath(user, r.URL.Query().Get("path"))
		t := fileTarget(targetOf(r.Context()))
		if e, err := f.files.StatFile(r.Context(), t, p); err == nil && e.Type == api.FileTypeDir {
			return api.Errorf(api.CodeInvalidArgument, "path '%s' is a directory", p)
		}
		c, err := f.files.ReadFile(r.Context(), t, node.ReadSpec{Path: p, Range: r.Header.Get("Range")})
		if err != nil {
			return err
		}
		defer c.Body.Close()
		h := w.Header()
		h.Set("Content-Type", "application/octet-stream")
		if c.ContentRange != "" {
			h.Set("Content-Range", c.ContentRange)
		}
		if c.ETag != "" {
			h.Set("ETag", c.ETag)
		}
		h.Set("Accept-Ranges", "bytes")
		if c.Status == http.StatusOK && acceptsGzip(r) {
			h.Set("Content-Encoding", "gzip")
			h.Add("Vary", "Accept-Encoding")
			w.WriteHeader(c.Status)
			zw := gzip.NewWriter(w)
			io.Copy(zw, c.Body)
			zw.Close()
			return nil
		}
		if c.ContentLength >= 0 {
			h.Set("Content-Length", strconv.FormatInt(c.ContentLength, 10))
		}
		w.WriteHeader(c.Status)
		io.Copy(w, c.Body) // a failed copy is the client's going away
		return nil
	}()
	if err != nil {
		writeError(w, r, f.side.log, err)
	}
}

// acceptsGzip reports whether the client asked for gzip.
func acceptsGzip(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		name, q, _ := strings.Cut(strings.TrimSpace(part), ";")
		if strings.EqualFold(strings.TrimSpace(name), "gzip") && strings.ReplaceAll(q, " ", "") != "q=0" {
			return true
		}
	}
	return false
}

func (f *filesAPI) upload(w http.ResponseWriter, r *http.Request) {
	out, err := func() ([]uploadEntry, error) {
		user, err := fileUser(r)
		if err != nil {
			return nil, err
		}
		body := io.Reader(r.Body)
		if strings.EqualFold(r.Header.Get("Content-Encoding"), "gzip") {
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				return nil, api.Errorf(api.CodeInvalidArgument, "the body is not gzip: %v", err)
			}
			defer zr.Close()
			body = zr
		}
		meta, err := uploadMetadata(r.Header)
		if err != nil {
			return nil, err
		}
		query := r.URL.Query().Get("path")
		mt, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
		if mt != "multipart/form-data" {
			if query == "" {
				return nil, api.Errorf(api.CodeInvalidArgument, "path is required for a raw upload")
			}
			e, err := f.write(r, user, absPath(user, query), body, meta)
			if err != nil {
				return nil, err
			}
			return []uploadEntry{e}, nil
		}
		var out []uploadEntry
		mr := multipart.NewReader(body, params["boundary"])
		for {
			part, err := mr.NextRawPart()
			if errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				return nil, api.Errorf(api.CodeInvalidArgument, "multipart body: %v", err)
			}
			if part.FormName() != "file" {
				continue
			}
			// The file name is the path, slashes and all: read it raw,
			// for Part.FileName keeps only its last element.
			_, cd, _ := mime.ParseMediaType(part.Header.Get("Content-Disposition"))
			name := cd["filename"]
			if query != "" {
				name = query
			}
			if name == "" {
				return nil, api.Errorf(api.CodeInvalidArgument, "a file part has no file name and path is not set")
			}
			e, err := f.write(r, user, absPath(user, name), part, meta)
			if err != nil {
				return nil, err
			}
			out = append(out, e)
		}
		return out, nil
	}()
	if err != nil {
		writeError(w, r, f.side.log, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// write replaces a file's content, making its missing parents first (as
// envd does) as the user; the file gets the metadata meta as its only
// user.e2b.* extended attributes (xattrs: whatever it had goes with the
// old content).
func (f *filesAPI) write(r *http.Request, user, p string, body io.Reader, meta map[string]string) (uploadEntry, error) {
	t := fileTarget(targetOf(r.Context()))
	dir := path.Dir(p)
	if _, err := f.files.StatFile(r.Context(), t, dir); api.ErrorCode(err) == api.CodeNotFound {
		if _, err := f.files.Mkdir(r.Context(), t, api.MkdirRequest{Path: dir}, user); err != nil {
			return uploadEntry{}, err
		}
	} else if err != nil {
		return uploadEntry{}, err
	}
	e, _, err := f.files.WriteFile(r.Context(), t, files.WriteRequest{Path: p, User: user, Size: -1, Xattrs: meta}, body)
	if err != nil {
		return uploadEntry{}, err
	}
	out := uploadEntry{Path: e.Path, Name: e.Name, Type: "file"}
	if m := metadataOf(e); len(m) > 0 {
		out.Metadata = m
	}
	return out, nil
}

// Bounds of a file's E2B metadata, as envd's: a key is at most what the
// kernel's xattr name leaves after user.e2b., and keys (each with the
// prefix) and values together fit fspath.MaxXattrBytes.
const maxMetadataKey = fspath.MaxXattrName - len(metadataPrefix)

// uploadMetadata reads an upload's X-Metadata-KEY headers: the keys
// lowercased, the first value of each, all printable ASCII, as the
// user.e2b.KEY extended attributes the files get (nil when none).
func uploadMetadata(h http.Header) (map[string]string, error) {
	var x map[string]string
	for name, vs := range h {
		key, ok := cutFold(name, "X-Metadata-")
		if !ok || len(vs) == 0 {
			continue
		}
		key = strings.ToLower(key)
		switch {
		case key == "":
			return nil, api.Errorf(api.CodeInvalidArgument, "a metadata header needs a key after X-Metadata-")
		case len(key) > maxMetadataKey:
			return nil, api.Errorf(api.CodeInvalidArgument, "metadata key %.40q…: a key has at most %d bytes", key, maxMetadataKey)
		case !printable(key) || !printable(vs[0]):
			return nil, api.Errorf(api.CodeInvalidArgument, "metadata %q: keys and values must be printable US-ASCII", key)
		}
		if x == nil {
			x = map[string]string{}
		}
		x[metadataPrefix+key] = vs[0]
	}
	if err := fspath.CheckXattrs(x); err != nil {
		return nil, api.Errorf(api.CodeInvalidArgument, "file metadata: %v", err)
	}
	return x, nil
}

// cutFold is strings.CutPrefix ignoring ASCII case.
func cutFold(s, prefix string) (string, bool) {
	if len(s) < len(prefix) || !strings.EqualFold(s[:len(prefix)], prefix) {
		return s, false
	}
	return s[len(prefix):], true
}

// printable says s is only bytes 0x20 to 0x7e.
func printable(s string) bool {
	for i := range len(s) {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}
