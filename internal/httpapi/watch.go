package httpapi

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/files"
	"github.com/cove-dev/cove/internal/control/lifecycle"
)

// watchKeepalive is how often a watch stream with nothing to say sends a
// keepalive (an SSE comment, or an empty NDJSON line), so that proxies
// keep it and a client gone is noticed.
const watchKeepalive = 15 * time.Second

// Bounds of watch streams: each open stream is a connection, a goroutine
// and a reader of a node's journal, so a team holds a bounded number of
// them (LimitWatchStreams) and one sandbox a part of those
// (watchStreamsPerSandbox), leaving room for the team's other sandboxes.
// A refused stream is told to retry after watchStreamRetryS: a slot
// frees when a stream closes, which the server cannot foresee.
const (
	watchStreamsPerSandbox = 32
	watchStreamRetryS      = 5
)

// watchSlots counts the watch streams open per team and per sandbox.
type watchSlots struct {
	mu      sync.Mutex
	perTeam int // 0: no bound per team
	teams   map[string]int
	// sandboxes are keyed by team and sandbox ID.
	sandboxes map[[2]string]int
}

// LimitWatchStreams bounds the file watch streams (GET
// /v1/sandboxes/{ref}/files/watch) one team may hold open at once, over
// all its sandboxes. Call it before serving.
func (h *Handler) LimitWatchStreams(n int) { h.watchStreams.perTeam = n }

// take reserves a slot for a stream of a team's sandbox, or reports a
// resource_exhausted error; release gives it back.
func (s *watchSlots) take(team, sandboxID string) (release func(), err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sb := [2]string{team, sandboxID}
	switch {
	case s.perTeam > 0 && s.teams[team] >= s.perTeam:
		return nil, &api.Error{
			Code:    api.CodeResourceExhausted,
			Message: fmt.Sprintf("this team has %d file watch streams open, the most allowed; close one (a recursive watch of a common parent can serve many directories) and retry", s.perTeam),
			Details: map[string]any{"retry_after_s": watchStreamRetryS, "limit": s.perTeam, "scope": "team"},
		}
	case s.sandboxes[sb] >= watchStreamsPerSandbox:
		return nil, &api.Error{
			Code:    api.CodeResourceExhausted,
			Message: fmt.Sprintf("sandbox %s has %d file watch streams open, the most allowed; close one and retry", sandboxID, watchStreamsPerSandbox),
			Details: map[string]any{"retry_after_s": watchStreamRetryS, "limit": watchStreamsPerSandbox, "scope": "sandbox"},
		}
	}
	if s.teams == nil {
		s.teams, s.sandboxes = map[string]int{}, map[[2]string]int{}
	}
	s.teams[team]++
	s.sandboxes[sb]++
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.teams[team]--; s.teams[team] <= 0 {
				delete(s.teams, team)
			}
			if s.sandboxes[sb]--; s.sandboxes[sb] <= 0 {
				delete(s.sandboxes, sb)
			}
		})
	}, nil
}

// watchFiles streams a directory's file events (GET
// /v1/sandboxes/{ref}/files/watch) as server-sent events when the client
// accepts text/event-stream, else as NDJSON, from after= (or
// Last-Event-ID) until the client goes or the watch ends.
func (h fileRoutes) watchFiles(w http.ResponseWriter, r *http.Request, p lifecycle.Principal) error {
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
	after, err := queryInt(r, "after", 0, 0, 1<<62)
	if err != nil {
		return err
	}
	if last := r.Header.Get("Last-Event-ID"); last != "" && r.URL.Query().Get("after") == "" {
		if after, err = strconv.ParseInt(last, 10, 64); err != nil || after < 0 {
			return api.Errorf(api.CodeInvalidArgument, "Last-Event-ID must be the seq of a watch record")
		}
	}
	// A sandbox's streams are counted by its ID, however the request
	// names it.
	sb, err := h.Sandboxes.GetSandbox(r.Context(), t.TeamID, t.Ref)
	if err != nil {
		return err
	}
	release, err := h.watchStreams.take(t.TeamID, sb.ID)
	if err != nil {
		return err
	}
	defer release()
	fw, err := h.Files.WatchFiles(r.Context(), t, files.WatchQuery{Path: path, Recursive: recursive, After: after})
	if err != nil {
		return err
	}
	defer fw.Close()
	sse := acceptsSSE(r)
	if sse {
		w.Header().Set("Content-Type", "text/event-stream")
	} else {
		w.Header().Set("Content-Type", "application/x-ndjson")
	}
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	bw := bufio.NewWriterSize(w, 32<<10)
	if rc.Flush() != nil {
		return nil
	}
	ctx := r.Context()
	for {
		nctx, cancel := context.WithTimeout(ctx, watchKeepalive)
		ev, err := fw.Next(nctx)
		cancel()
		switch {
		case err == nil:
			b, _ := json.Marshal(ev)
			if sse {
				bw.WriteString("id: " + strconv.FormatInt(ev.Seq, 10) + "\nevent: " + string(ev.Type) + "\ndata: ")
				bw.Write(b)
				bw.WriteString("\n\n")
			} else {
				bw.Write(append(b, '\n'))
			}
		case ctx.Err() == nil && nctx.Err() != nil:
			if sse {
				bw.WriteString(": keepalive\n\n")
			} else {
				bw.WriteString("\n")
			}
		case errors.Is(err, io.EOF):
			// The watch ended (its directory or sandbox is gone): a
			// clean end of the stream.
			bw.Flush()
			rc.Flush()
			return nil
		case ctx.Err() != nil:
			return nil
		default:
			// The node's stream broke: the client sees a cut stream and
			// resumes with after=.
			bw.Flush()
			rc.Flush()
			h.log.Debug("watch stream broke", "sandbox", t.Ref, "path", path, "err", err)
			panic(http.ErrAbortHandler)
		}
		if bw.Flush() != nil || rc.Flush() != nil {
			return nil
		}
	}
}

// acceptsSSE says the client asked for server-sent events.
func acceptsSSE(r *http.Request) bool {
	for _, v := range r.Header.Values("Accept") {
		for _, part := range strings.Split(v, ",") {
			mt, _, _ := strings.Cut(part, ";")
			if strings.EqualFold(strings.TrimSpace(mt), "text/event-stream") {
				return true
			}
		}
	}
	return false
}
