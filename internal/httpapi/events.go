package httpapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/cove-dev/cove/internal/server"
)

// eventQuery reads sandbox=, type= (repeatable or comma-separated) and
// after= for both event calls; after= wins over cursor=.
func eventQuery(r *http.Request) (server.EventQuery, error) {
	pg, err := paging(r)
	if err != nil {
		return server.EventQuery{}, err
	}
	q := server.EventQuery{Sandbox: r.URL.Query().Get("sandbox"), Types: csv(r, "type"), Page: pg}
	if after := r.URL.Query().Get("after"); after != "" {
		q.Cursor = after
	}
	return q, nil
}

func (h *Handler) listEvents(w http.ResponseWriter, r *http.Request, p server.Principal) error {
	q, err := eventQuery(r)
	if err != nil {
		return err
	}
	l, err := h.srv.ListEvents(r.Context(), p.Team.ID, q)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, l)
}

// streamEvents serves the team's events as server-sent events, from after=
// or Last-Event-ID, until the client goes away.
func (h *Handler) streamEvents(w http.ResponseWriter, r *http.Request, p server.Principal) error {
	q, err := eventQuery(r)
	if err != nil {
		return err
	}
	if last := r.Header.Get("Last-Event-ID"); last != "" {
		q.Cursor = last
	}
	q.Limit = 500
	// Check the sandbox and the cursor before the stream starts, so a bad
	// one is an error answer rather than a stream that ends.
	check := q
	check.Limit = 1
	if _, err := h.srv.ListEvents(r.Context(), p.Team.ID, check); err != nil {
		return err
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	rc.Flush()
	keepalive := time.NewTicker(15 * time.Second)
	defer keepalive.Stop()
	for {
		changed := h.srv.Changes()
		l, err := h.srv.ListEvents(r.Context(), p.Team.ID, q)
		if err != nil {
			return nil // the stream has started; the client reconnects with Last-Event-ID
		}
		evs := l.Items
		for _, e := range evs {
			b, _ := json.Marshal(e)
			if _, err := fmt.Fprintf(w, "id: %s\nevent: %s\ndata: %s\n\n", e.ID, e.Type, b); err != nil {
				return nil
			}
			q.Cursor = e.ID
		}
		if len(evs) > 0 {
			rc.Flush()
			if l.NextCursor != "" {
				continue
			}
		}
		select {
		case <-changed:
		case <-keepalive.C:
			if _, err := fmt.Fprint(w, ": keepalive\n\n"); err != nil {
				return nil
			}
			rc.Flush()
		case <-r.Context().Done():
			return nil
		}
	}
}
