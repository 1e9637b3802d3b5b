package cove

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/cove-dev/cove/api"
)

// WatchQuery says what WatchFiles watches: the directory Path (absolute
// inside the sandbox), everything below it with Recursive, the events
// after After (a FileEvent's Seq; 0: from now on).
type WatchQuery struct {
	Path      string
	Recursive bool
	After     int64
	// NoWake fails the watch of an asleep sandbox instead of waking it.
	NoWake bool
}

// WatchFiles streams a directory's file events (NDJSON), calling fn for
// each in order until ctx is done, fn fails or the watch ends (its
// directory was removed, its sandbox stopped: nil). A cut connection is
// reopened with after= the last Seq seen, so fn misses nothing the node
// still keeps; what it cannot give comes as a FileDropped record with the
// count lost. It gives up after the retry policy's attempts without an
// event.
func (c *Client) WatchFiles(ctx context.Context, ref string, q WatchQuery, fn func(api.FileEvent) error) error {
	failures := 0
	for {
		progressed, ended, err := c.watchOnce(ctx, ref, &q, fn)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if ended && err == nil {
			return nil
		}
		var ce *Error
		if err != nil && (!errors.As(err, &ce) || !retryOn(ce)) {
			return err
		}
		if ce == nil {
			ce = &Error{Code: api.CodeUnavailable, Message: "watch stream ended"}
			err = ce
		}
		if !c.resumeAfter(ctx, &failures, progressed, ce) {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
	}
}

// watchOnce reads one connection of a watch, moving q.After past each
// record fn took. ended says the server ended the stream cleanly.
func (c *Client) watchOnce(ctx context.Context, ref string, q *WatchQuery, fn func(api.FileEvent) error) (progressed, ended bool, err error) {
	v := fileOptions{noWake: q.NoWake}.query(q.Path)
	if q.Recursive {
		v.Set("recursive", "true")
	}
	if q.After > 0 {
		v.Set("after", strconv.FormatInt(q.After, 10))
	}
	req, err := c.newRequest(ctx, http.MethodGet, filesPath(ref, "watch"), v, nil)
	if err != nil {
		return false, false, err
	}
	req.Header.Set("Accept", "application/x-ndjson")
	resp, err := c.roundTrip(req, false)
	if err != nil {
		return false, false, err
	}
	defer resp.Body.Close()
	r := bufio.NewReaderSize(resp.Body, 64<<10)
	for {
		line, err := r.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			var ev api.FileEvent
			if jerr := json.Unmarshal(line, &ev); jerr != nil {
				if err == nil {
					return progressed, false, fmt.Errorf("decode watch record: %w", jerr)
				}
			} else {
				if ferr := fn(ev); ferr != nil {
					return progressed, false, ferr
				}
				progressed = true
				if ev.Seq > q.After {
					q.After = ev.Seq
				}
			}
		}
		if err != nil {
			if ctx.Err() != nil {
				return progressed, false, ctx.Err()
			}
			// A clean end of the body is the server's end of the watch
			// (its directory or sandbox is gone); a broken one is retried.
			if errors.Is(err, io.EOF) {
				return progressed, true, nil
			}
			return progressed, false, &Error{Code: api.CodeUnavailable, Message: "watch stream broke: " + err.Error(), Err: err}
		}
	}
}
