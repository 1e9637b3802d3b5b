package httpapi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/lifecycle"
	"github.com/cove-dev/cove/internal/control/teams"
)

type handlerFunc = func(http.ResponseWriter, *http.Request, lifecycle.Principal) error

// authFunc registers a route behind API-key authentication; serveFunc
// one behind authn.
type (
	authFunc  = func(pattern string, fn handlerFunc)
	serveFunc = func(pattern string, authn func(*http.Request) (lifecycle.Principal, error), fn handlerFunc)
)

// idempotent honours Idempotency-Key on a mutating call: the first
// request with a key claims it (in the store, seen by every replica) and
// runs, and its successful answer is kept for a day; the same key with the
// same request replays it (with Idempotent-Replayed: true); the same key
// with another request is refused; a retry while the first attempt still
// runs is refused with conflict and Retry-After. The request is the
// method, path, query, conditional headers and body.
func (h *shared) idempotent(next handlerFunc) handlerFunc {
	return h.idempotentWith(next, idempotency{})
}

// idempotentSecret is idempotent, keeping (and replaying) answers as sa
// says.
func (h *shared) idempotentSecret(next handlerFunc, sa secretAnswer) handlerFunc {
	return h.idempotentWith(next, idempotency{secret: sa})
}

// idempotentUpload is idempotent for a call whose body is an upload,
// too large to keep in memory: the request is told apart by its length
// and digest headers instead of its bytes, which stream to the call.
func (h *shared) idempotentUpload(next handlerFunc) handlerFunc {
	return h.idempotentWith(next, idempotency{upload: true})
}

// idempotency says how a call is made idempotent; the zero value is for a
// JSON call whose answer holds no secret.
type idempotency struct {
	secret secretAnswer
	upload bool
	// refuse, when set, is asked of a request with a key (its body read)
	// whether its answer would hold a credential kept only as a hash: an
	// error refuses the key.
	refuse func(body []byte) error
	// headers, when set, puts back the headers of a replayed successful
	// answer that are made from its body (a file entry's ETag): only the
	// status and body are kept.
	headers func(h http.Header, body []byte)
}

// fileEntryAnswer is the idempotency of calls that answer a file entry
// with its version as ETag.
var fileEntryAnswer = idempotency{headers: func(h http.Header, body []byte) {
	var e api.FileEntry
	if json.Unmarshal(body, &e) == nil && e.Version != "" {
		h.Set("ETag", `"`+e.Version+`"`)
	}
}}

// secretAnswer is how an idempotent create whose answer holds a secret
// keeps that answer without the secret: strip takes the secret out of the
// body that is kept, restore puts it back into a replayed one from where
// the secret lives. Zero for answers without secrets.
type secretAnswer struct {
	strip   func(body []byte) ([]byte, error)
	restore func(ctx context.Context, p lifecycle.Principal, body []byte) ([]byte, error)
}

// hashedHeaders are the request headers that change what a call does,
// part of the request an Idempotency-Key is bound to.
var hashedHeaders = []string{"If-Match", "If-None-Match", "Repr-Digest", "Content-Digest"}

// idempotentWith is idempotent as opt says.
func (h *shared) idempotentWith(next handlerFunc, opt idempotency) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, p lifecycle.Principal) error {
		key := r.Header.Get("Idempotency-Key")
		if key == "" {
			return next(w, r, p)
		}
		if len(key) > 255 || !printable(key) {
			return api.Errorf(api.CodeInvalidArgument, "Idempotency-Key must be 1 to 255 printable ASCII characters")
		}
		sum := sha256.New()
		io.WriteString(sum, r.Method+"\n"+r.URL.Path+"\n"+r.URL.RawQuery+"\n")
		for _, name := range hashedHeaders {
			io.WriteString(sum, name+": "+strings.Join(r.Header.Values(name), ", ")+"\n")
		}
		if opt.upload {
			fmt.Fprintf(sum, "Content-Length: %d\n", r.ContentLength)
		} else {
			body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
			if err != nil {
				return api.Errorf(api.CodeInvalidArgument, "read request body: %v", err)
			}
			if len(body) > maxBody {
				return api.Errorf(api.CodePayloadTooLarge, "request body is larger than %d bytes", maxBody)
			}
			if opt.refuse != nil {
				if err := opt.refuse(body); err != nil {
					return err
				}
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			sum.Write(body)
		}
		var (
			live     http.Header // headers of an answer made now, not replayed
			liveBody []byte      // its body, secret included
		)
		ans, replayed, err := h.Idempotency.Idempotently(r.Context(), p.Team.ID, key, hex.EncodeToString(sum.Sum(nil)), func(ctx context.Context) teams.Answer {
			// ctx derives the IDs the call creates from the key's claim.
			r := r.WithContext(ctx)
			rec := &recorder{header: http.Header{}, under: w}
			live = rec.header
			if err := next(rec, r, p); err != nil {
				h.writeError(rec, r, err)
				if rec.status == 0 {
					// The client went away and nothing was answered: no
					// answer to keep, and the key is released.
					rec.status = http.StatusServiceUnavailable
				}
			}
			if rec.status == 0 {
				rec.status = http.StatusOK
			}
			liveBody = rec.body.Bytes()
			kept := teams.Answer{Status: rec.status, Body: liveBody}
			if opt.secret.strip != nil && kept.Status >= 200 && kept.Status < 300 {
				b, err := opt.secret.strip(liveBody)
				if err != nil {
					// Never kept with its secret: answered as failed (and
					// so not kept), though the resource exists.
					rec := &recorder{header: http.Header{}, under: w}
					h.writeError(rec, r, fmt.Errorf("strip the secret of a kept answer: %w", err))
					liveBody = rec.body.Bytes()
					return teams.Answer{Status: rec.status, Body: liveBody}
				}
				kept.Body = b
			}
			return kept
		})
		if err != nil {
			return err
		}
		out := ans.Body
		switch {
		case !replayed:
			out = liveBody
		case opt.secret.restore != nil && ans.Status >= 200 && ans.Status < 300:
			if out, err = opt.secret.restore(r.Context(), p, ans.Body); err != nil {
				return err
			}
		}
		for _, name := range []string{"Location", "Retry-After", "Cache-Control", "Content-Type", "ETag"} {
			if v := live.Get(name); v != "" {
				w.Header().Set(name, v)
			}
		}
		if replayed && opt.headers != nil && ans.Status >= 200 && ans.Status < 300 {
			opt.headers(w.Header(), out)
		}
		if len(out) > 0 && w.Header().Get("Content-Type") == "" {
			w.Header().Set("Content-Type", "application/json")
		}
		if replayed {
			w.Header().Set("Idempotent-Replayed", "true")
		}
		w.WriteHeader(ans.Status)
		w.Write(out)
		return nil
	}
}

// refuseIdempotencyKey is for calls whose answer holds a credential
// shown once and kept only as a hash (an API key, a ticket, a join
// token): keeping the answer for replay would keep the credential.
func refuseIdempotencyKey(what string, next handlerFunc) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, p lifecycle.Principal) error {
		if r.Header.Get("Idempotency-Key") != "" {
			return keyRefused(what)
		}
		return next(w, r, p)
	}
}

func keyRefused(what string) error {
	return api.Errorf(api.CodeUnprocessable, "Idempotency-Key is not accepted here: the answer holds %s shown only once, which cove keeps only as a hash", what)
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return s != ""
}

// recorder keeps a handler's answer in memory. The connection's
// deadlines still reach the real writer (under): an upload's idle
// deadline holds for a keyed request too. Nothing else does: a flush
// would send the answer before it is kept.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
	under  http.ResponseWriter
}

// SetReadDeadline sets the request's read deadline on the connection
// (http.ResponseController finds it here).
func (r *recorder) SetReadDeadline(t time.Time) error {
	return http.NewResponseController(r.under).SetReadDeadline(t)
}

// SetWriteDeadline sets the answer's write deadline on the connection.
func (r *recorder) SetWriteDeadline(t time.Time) error {
	return http.NewResponseController(r.under).SetWriteDeadline(t)
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
}

func (r *recorder) Write(p []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.body.Write(p)
}

// refusePrivatePreview refuses a key on a private preview's create: its
// answer holds the preview's token, kept only as a hash.
func refusePrivatePreview(body []byte) error {
	var req api.CreatePreviewRequest
	if err := json.Unmarshal(body, &req); err != nil || req.Visibility == api.VisibilityPublic {
		// A body that does not decode is refused by the call itself.
		return nil
	}
	return keyRefused("a private preview's token")
}
