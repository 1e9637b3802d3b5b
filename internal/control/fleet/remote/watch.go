package remote

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/node"
)

// WatchFiles reads a file watch's journal on the node: a stream of its
// records, read by a goroutine of the watch's own, until Close.
func (c *Client) WatchFiles(ctx context.Context, sandboxID string, spec node.WatchSpec) (node.FileWatch, error) {
	q := url.Values{"sandbox": {sandboxID}, "path": {spec.Path}, "recursive": {strconv.FormatBool(spec.Recursive)},
		"after": {strconv.FormatInt(spec.After, 10)}}
	wctx, cancel := context.WithCancel(c.ctx)
	stop := context.AfterFunc(ctx, cancel)
	resp, err := c.do(wctx, request{method: http.MethodGet, path: "files/watch", query: q})
	if !stop() && err == nil {
		resp.Body.Close()
		err = ctx.Err()
	}
	if err != nil {
		cancel()
		return nil, err
	}
	w := &remoteWatch{cancel: cancel, ch: make(chan api.FileEvent, watchBuffer), done: make(chan struct{})}
	c.wg.Go(func() {
		defer resp.Body.Close()
		w.pump(wctx, resp.Body)
	})
	return w, nil
}

// watchBuffer is how many records of a node's watch stream wait for Next
// on this side, so that a reader that takes what is at hand without
// waiting (the E2B listener's polled watchers) finds what has arrived.
const watchBuffer = 256

// remoteWatch is a node's watch stream; pump hands its records to Next.
type remoteWatch struct {
	cancel context.CancelFunc
	ch     chan api.FileEvent
	done   chan struct{} // closed when the stream ended; err says how
	err    error
	once   sync.Once
}

func (w *remoteWatch) pump(ctx context.Context, body io.Reader) {
	defer close(w.done)
	r := bufio.NewReaderSize(body, 64<<10)
	for {
		line, err := r.ReadSlice('\n')
		if err != nil {
			if errors.Is(err, bufio.ErrBufferFull) {
				err = fmt.Errorf("a watch record from the node is over %d bytes", r.Size())
			} else if errors.Is(err, io.EOF) {
				err = io.EOF
			} else {
				err = api.Errorf(api.CodeUnavailable, "the node's watch stream broke: %v", err)
			}
			w.err = err
			return
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue // keepalive
		}
		var ev api.FileEvent
		if err := json.Unmarshal(line, &ev); err != nil {
			w.err = fmt.Errorf("bad watch record from the node: %w", err)
			return
		}
		select {
		case w.ch <- ev:
		case <-ctx.Done():
			w.err = ctx.Err()
			return
		}
	}
}

func (w *remoteWatch) Next(ctx context.Context) (api.FileEvent, error) {
	// A record at hand comes first, even when ctx has ended.
	select {
	case ev := <-w.ch:
		return ev, nil
	default:
	}
	select {
	case ev := <-w.ch:
		return ev, nil
	case <-w.done:
		select {
		case ev := <-w.ch:
			return ev, nil
		default:
		}
		return api.FileEvent{}, w.err
	case <-ctx.Done():
		return api.FileEvent{}, ctx.Err()
	}
}

func (w *remoteWatch) Close() { w.once.Do(w.cancel) }
