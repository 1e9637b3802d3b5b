package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/lifecycle"
	"github.com/cove-dev/cove/internal/store"
)

// A write that found the server's data disk full (store.DiskFull: ENOSPC
// from a file under the data dir, or the SQLite database unable to grow)
// is no fault of the request and no bug: it answers 507
// insufficient_storage naming the disk, and nothing of the call was kept.
// A call that asks for a new sandbox answers 429 resource_exhausted
// instead, as admission refuses a sandbox the node has no room for.

// NameDataDisk names the disk a full write is reported on, as a noun
// phrase: "the node's data disk (/var/lib/cove)". Call it before serving.
func (h *Handler) NameDataDisk(name string) { h.sh.dataDisk = name }

// admitsKey marks a request (its context) that asks for a new sandbox.
type admitsKey struct{}

// admits marks next as a call that asks for a new sandbox: a full data
// disk refuses it with resource_exhausted, both where next answers
// through writeError itself (under an Idempotency-Key) and where it
// returns the error.
func (h *shared) admits(next handlerFunc) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, p lifecycle.Principal) error {
		r = r.WithContext(context.WithValue(r.Context(), admitsKey{}, true))
		err := next(w, r, p)
		var coded *api.Error
		if err != nil && !errors.As(err, &coded) && store.DiskFull(err) {
			return h.diskFull(r, err)
		}
		return err
	}
}

// diskFull is the answer to a call whose write found the disk full; the
// cause is logged for the operator.
func (h *shared) diskFull(r *http.Request, err error) *api.Error {
	disk := h.dataDisk
	if disk == "" {
		disk = "the server's data disk"
	}
	h.log.Warn("a write found the data disk full", "method", r.Method, "path", r.URL.Path,
		"request_id", r.Header.Get(requestIDHeader), "err", err)
	if admits, _ := r.Context().Value(admitsKey{}).(bool); admits {
		return api.Errorf(api.CodeResourceExhausted,
			"%s is full: this node cannot hold another sandbox now; nothing was created, try again once space is freed", disk)
	}
	return &api.Error{Code: api.CodeInsufficientStorage,
		Message: fmt.Sprintf("%s is full: nothing of this call was kept; retry once space is freed", disk)}
}
