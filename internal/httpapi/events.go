package httpapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/server"
	"github.com/cove-dev/cove/internal/store"
)

// eventFilter reads sandbox=, type= (repeatable or comma-separated) and
// after= for both event calls.
func (h *Handler) eventFilter(r *http.Request, p server.Principal) (store.EventFilter, error) {
	q := r.URL.Query()
	f := store.EventFilter{TeamID: p.Team.ID, After: q.Get("after")}
	if ref := q.Get("sandbox"); ref != "" {
		sb, err := h.srv.GetSandbox(r.Context(), p.Team.ID, ref)
		if err != nil {
			return f, err
		}
		f.SandboxID = sb.ID
	}
	for _, v := range q["type"] {
		for _, t := range strings.Split(v, ",") {
			if t != "" {
				f.Types = append(f.Types, t)
			}
		}
	}
	return f, nil
}

func (h *Handler) listEvents(w http.ResponseWriter, r *http.Request, p server.Principal) error {
	limit, cursor, err := paging(r)
	if err != nil {
		return err
	}
	f, err := h.eventFilter(r, p)
	if err != nil {
		return err
	}
	if f.After == "" {
		f.After = cursor
	}
	f.Limit = limit + 1
	evs, err := h.srv.ListEvents(r.Context(), f)
	if err != nil {
		return err
	}
	return list(w, evs, limit, func(e api.Event) string { return e.ID })
}

// streamEvents serves the team's events as server-sent events, from after=
// or Last-Event-ID, until the client goes away.
func (h *Handler) streamEvents(w http.ResponseWriter, r *http.Request, p server.Principal) error {
	f, err := h.eventFilter(r, p)
	if err != nil {
		return err
	}
	if last := r.Header.Get("Last-Event-ID"); last != "" {
		f.After = last
	}
	f.Limit = 500
	// Check the cursor before the stream starts, so a bad one is a 400.
	if _, err := h.srv.ListEvents(r.Context(), store.EventFilter{TeamID: f.TeamID, After: f.After, Limit: 1}); err != nil {
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
		evs, err := h.srv.ListEvents(r.Context(), f)
		if err != nil {
			return nil // the stream has started; the client reconnects with Last-Event-ID
		}
		for _, e := range evs {
			b, _ := json.Marshal(e)
			if _, err := fmt.Fprintf(w, "id: %s\nevent: %s\ndata: %s\n\n", e.ID, e.Type, b); err != nil {
				return nil
			}
			f.After = e.ID
		}
		if len(evs) > 0 {
			rc.Flush()
			if len(evs) == f.Limit {
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
