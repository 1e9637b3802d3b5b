package nodeapi

import (
	"encoding/json"
	"net/http"
	"strconv"
	"sync"

	"github.com/cove-dev/cove/api"
)

// backlogSize bounds the events kept for a reader to resume from.
const backlogSize = 10000

// backlog is the node's events in order, the newest max of them.
type backlog struct {
	epoch   string
	max     int
	mu      sync.Mutex
	seq     int64 // of the newest event
	events  []Event
	changed chan struct{}
}

func newBacklog(epoch string, max int) *backlog {
	return &backlog{epoch: epoch, max: max, changed: make(chan struct{})}
}

func (b *backlog) add(e Event) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.seq++
	e.Seq = b.seq
	b.events = append(b.events, e)
	if len(b.events) > b.max {
		b.events = append(b.events[:0:0], b.events[len(b.events)-b.max:]...)
	}
	close(b.changed)
	b.changed = make(chan struct{})
}

// since returns the events after seq, how many after it are gone from the
// backlog, and a channel closed at the next event.
func (b *backlog) since(after int64) (events []Event, lost int64, changed <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if after > b.seq {
		after = b.seq // another run's sequence: nothing of it is here
	}
	first := b.seq - int64(len(b.events)) + 1
	if after+1 < first {
		lost = first - after - 1
		after = first - 1
	}
	events = append([]Event(nil), b.events[after-first+1:]...)
	return events, lost, b.changed
}

// events streams the node's events after the sequence number `after`,
// one JSON object a line, until the reader or the server goes.
func (s *Server) handleEvents(w http.ResponseWriter, r *http.Request) {
	after, err := strconv.ParseInt(r.URL.Query().Get("after"), 10, 64)
	if err != nil && r.URL.Query().Get("after") != "" {
		writeError(w, api.Errorf(api.CodeInvalidArgument, "after must be a sequence number"))
		return
	}
	if r.URL.Query().Get("epoch") != s.events.epoch {
		after = 0 // the reader's sequence numbers are of another run
	}
	events, lost, changed := s.events.since(after)
	if lost > 0 {
		s.log.Warn("events fell out of the backlog before the control plane read them", "lost", lost)
	}
	w.Header().Set(EventsEpochHeader, s.events.epoch)
	w.Header().Set(EventsLostHeader, strconv.FormatInt(lost, 10))
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	enc := json.NewEncoder(w)
	for {
		for _, e := range events {
			if err := enc.Encode(e); err != nil {
				return
			}
			after = e.Seq
		}
		if err := rc.Flush(); err != nil {
			return
		}
		select {
		case <-changed:
		case <-r.Context().Done():
			return
		case <-s.ctx.Done():
			return
		}
		events, _, changed = s.events.since(after)
	}
}
