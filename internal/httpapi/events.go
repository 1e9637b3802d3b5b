package httpapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/events"
	"github.com/cove-dev/cove/internal/control/lifecycle"
)

// eventRoutes serve the event log, listed and streamed.
type eventRoutes struct {
	*shared
	Events       Events
	eventStreams *streamSlots
}

func (h eventRoutes) routes(auth authFunc) {
	auth("GET /v1/events", h.listEvents)
	auth("GET /v1/events/stream", h.streamEvents)
}

// eventStreamRetryS is the Retry-After of a stream refused for the team's
// cap: a slot frees when one of its streams closes, which the server
// cannot foresee, so the client is asked to try again shortly.
const eventStreamRetryS = 5

// streamSlots counts the event streams each team holds open, so that one
// team cannot hold an unbounded number of connections (each a goroutine
// and a store query per change) against the server.
type streamSlots struct {
	mu    sync.Mutex
	limit int // 0: no cap
	open  map[string]int
}

// LimitEventStreams caps the event streams one team may hold open at
// once. Call it before serving.
func (h *Handler) LimitEventStreams(n int) { h.eventStreams.limit = n }

// take reserves a slot for team, or reports a resource_exhausted error.
// The caller gives it back with release.
func (s *streamSlots) take(team string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.limit > 0 && s.open[team] >= s.limit {
		return &api.Error{
			Code:    api.CodeResourceExhausted,
			Message: fmt.Sprintf("this team has %d event streams open, the most allowed; close one (each stream sees all the team's events, so one can serve many readers) and retry", s.limit),
			Details: map[string]any{"retry_after_s": eventStreamRetryS, "limit": s.limit},
		}
	}
	if s.open == nil {
		s.open = map[string]int{}
	}
	s.open[team]++
	return nil
}

func (s *streamSlots) release(team string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open[team]--; s.open[team] <= 0 {
		delete(s.open, team)
	}
}

// eventQuery reads sandbox=, type= (repeatable or comma-separated) and
// after= for both event calls; after= wins over cursor=.
func eventQuery(r *http.Request) (events.Query, error) {
	pg, err := paging(r)
	if err != nil {
		return events.Query{}, err
	}
	q := events.Query{Sandbox: r.URL.Query().Get("sandbox"), Types: csv(r, "type"), Page: pg}
	if after := r.URL.Query().Get("after"); after != "" {
		q.Cursor = after
	}
	return q, nil
}

func (h eventRoutes) listEvents(w http.ResponseWriter, r *http.Request, p lifecycle.Principal) error {
	q, err := eventQuery(r)
	if err != nil {
		return err
	}
	l, err := h.Events.ListEvents(r.Context(), p.Team.ID, q)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, l)
}

// streamEvents serves the team's events as server-sent events, from after=
// or Last-Event-ID, until the client goes away.
func (h eventRoutes) streamEvents(w http.ResponseWriter, r *http.Request, p lifecycle.Principal) error {
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
	if _, err := h.Events.ListEvents(r.Context(), p.Team.ID, check); err != nil {
		return err
	}
	if err := h.eventStreams.take(p.Team.ID); err != nil {
		return err
	}
	defer h.eventStreams.release(p.Team.ID)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	rc.Flush()
	keepalive := time.NewTicker(15 * time.Second)
	defer keepalive.Stop()
	for {
		changed := h.Events.Changes()
		l, err := h.Events.ListEvents(r.Context(), p.Team.ID, q)
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
