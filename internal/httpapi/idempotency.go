package httpapi

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/server"
)

type handlerFunc = func(http.ResponseWriter, *http.Request, server.Principal) error

// idempotent honours Idempotency-Key on a create call: the first request
// with a key runs and its successful answer is kept for a day; the same
// key with the same request replays it (with Idempotent-Replayed: true);
// the same key with another request is refused.
func (h *Handler) idempotent(next handlerFunc) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, p server.Principal) error {
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
		var live http.Header // headers of an answer made now, not replayed
		ans, replayed, err := h.srv.Idempotently(r.Context(), p.Team.ID, key, hex.EncodeToString(sum.Sum(nil)), func() server.Answer {
			rec := &recorder{header: http.Header{}}
			live = rec.header
			if err := next(rec, r, p); err != nil {
				h.writeError(rec, r, err)
			}
			if rec.status == 0 {
				rec.status = http.StatusOK
			}
			return server.Answer{Status: rec.status, Body: rec.body.Bytes()}
		})
		if err != nil {
			return err
		}
		if loc := live.Get("Location"); loc != "" {
			w.Header().Set("Location", loc)
		}
		w.Header().Set("Content-Type", "application/json")
		if replayed {
			w.Header().Set("Idempotent-Replayed", "true")
		}
		w.WriteHeader(ans.Status)
		w.Write(ans.Body)
		return nil
	}
}

// refuseIdempotencyKey is for create calls whose answer holds a secret
// shown once: keeping it for replay would keep the secret.
func refuseIdempotencyKey(next handlerFunc) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, p server.Principal) error {
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
