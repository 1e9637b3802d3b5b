package httpapi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"

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

// idempotent honours Idempotency-Key on a create call: the first request
// with a key runs and its successful answer is kept for a day; the same
// key with the same request replays it (with Idempotent-Replayed: true);
// the same key with another request is refused.
func (h *shared) idempotent(next handlerFunc) handlerFunc {
	return h.idempotentSecret(next, secretAnswer{})
}

// secretAnswer is how an idempotent create whose answer holds a secret
// keeps that answer without the secret: strip takes the secret out of the
// body that is kept, restore puts it back into a replayed one from where
// the secret lives. Zero for answers without secrets.
type secretAnswer struct {
	strip   func(body []byte) ([]byte, error)
	restore func(ctx context.Context, p lifecycle.Principal, body []byte) ([]byte, error)
}

// idempotentSecret is idempotent, keeping (and replaying) answers as sa
// says.
func (h *shared) idempotentSecret(next handlerFunc, sa secretAnswer) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, p lifecycle.Principal) error {
		key := r.Header.Get("Idempotency-Key")
		if key == "" {
			return next(w, r, p)
		}
		if len(key) > 255 || !printable(key) {
			return api.Errorf(api.CodeInvalidArgument, "Idempotency-Key must be 1 to 255 printable ASCII characters")
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
		if err != nil {
			return api.Errorf(api.CodeInvalidArgument, "read request body: %v", err)
		}
		if len(body) > maxBody {
			return api.Errorf(api.CodePayloadTooLarge, "request body is larger than %d bytes", maxBody)
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		sum := sha256.New()
		io.WriteString(sum, r.Method+"\n"+r.URL.Path+"\n"+r.URL.RawQuery+"\n")
		sum.Write(body)
		var (
			live     http.Header // headers of an answer made now, not replayed
			liveBody []byte      // its body, secret included
		)
		ans, replayed, err := h.Idempotency.Idempotently(r.Context(), p.Team.ID, key, hex.EncodeToString(sum.Sum(nil)), func() teams.Answer {
			rec := &recorder{header: http.Header{}}
			live = rec.header
			if err := next(rec, r, p); err != nil {
				h.writeError(rec, r, err)
			}
			if rec.status == 0 {
				rec.status = http.StatusOK
			}
			liveBody = rec.body.Bytes()
			kept := teams.Answer{Status: rec.status, Body: liveBody}
			if sa.strip != nil && kept.Status >= 200 && kept.Status < 300 {
				b, err := sa.strip(liveBody)
				if err != nil {
					// Never kept with its secret: answered as failed (and
					// so not kept), though the resource exists.
					rec := &recorder{header: http.Header{}}
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
		case sa.restore != nil && ans.Status >= 200 && ans.Status < 300:
			if out, err = sa.restore(r.Context(), p, ans.Body); err != nil {
				return err
			}
		}
		if loc := live.Get("Location"); loc != "" {
			w.Header().Set("Location", loc)
		}
		w.Header().Set("Content-Type", "application/json")
		if replayed {
			w.Header().Set("Idempotent-Replayed", "true")
		}
		w.WriteHeader(ans.Status)
		w.Write(out)
		return nil
	}
}

// refuseIdempotencyKey is for create calls whose answer holds a secret
// shown once: keeping it for replay would keep the secret.
func refuseIdempotencyKey(next handlerFunc) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, p lifecycle.Principal) error {
		if r.Header.Get("Idempotency-Key") != "" {
			return api.Errorf(api.CodeUnprocessable, "Idempotency-Key is not accepted here: the answer holds an API key shown only once, which cove does not keep")
		}
		return next(w, r, p)
	}
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return s != ""
}

// recorder keeps a handler's answer in memory.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
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
