package nodeapi

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/node"
)

// WatchKeepalive is how often a file watch stream with nothing to say
// sends an empty line, so that a control plane gone is noticed.
const WatchKeepalive = 15 * time.Second

// handleWatch streams a file watch's records as NDJSON
// (GET files/watch?sandbox=&path=&recursive=&after=): the status once the
// watch is in place, then a record a line (an empty line now and then
// while there is none) until the reader or the node goes.
func (s *Server) handleWatch(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	spec := node.WatchSpec{Path: q.Get("path"), Recursive: q.Get("recursive") == "true"}
	if v := q.Get("after"); v != "" {
		after, err := strconv.ParseInt(v, 10, 64)
		if err != nil || after < 0 {
			writeError(w, api.Errorf(api.CodeInvalidArgument, "after must be a sequence number"))
			return
		}
		spec.After = after
	}
	fw, err := s.n.WatchFiles(r.Context(), q.Get("sandbox"), spec)
	if err != nil {
		writeError(w, err)
		return
	}
	defer fw.Close()
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	if rc.Flush() != nil {
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stop := context.AfterFunc(s.ctx, cancel)
	defer stop()
	enc := json.NewEncoder(w)
	for {
		nctx, ncancel := context.WithTimeout(ctx, WatchKeepalive)
		ev, err := fw.Next(nctx)
		ncancel()
		switch {
		case err == nil:
			if enc.Encode(ev) != nil || rc.Flush() != nil {
				return
			}
		case ctx.Err() == nil && nctx.Err() != nil:
			if _, err := w.Write([]byte("\n")); err != nil || rc.Flush() != nil {
				return
			}
		default:
			return // the watch ended (EOF) or the reader went
		}
	}
}
