package client

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/cove-dev/cove/internal/agent/wire"
	"github.com/cove-dev/cove/internal/fspath"
)

// FileWatch is a watch stream of the agent (wire/watch.go): Next returns
// its events, each checked, and Close ends it.
type FileWatch struct {
	dir  string
	body io.ReadCloser
	r    *bufio.Reader
}

// WatchFiles watches the directory p (and, with recursive, all below it)
// and returns once the watch is in place.
func (c *Client) WatchFiles(ctx context.Context, p string, recursive bool) (*FileWatch, error) {
	q := url.Values{"path": {p}}
	if recursive {
		q.Set("recursive", "true")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://agent/v1/files/watch?"+q.Encode(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.do(req, true)
	if err != nil {
		return nil, fmt.Errorf("watch %s: %w", p, err)
	}
	if resp.StatusCode != http.StatusOK {
		defer drain(resp)
		return nil, fmt.Errorf("watch %s: %w", p, readError(resp))
	}
	w := &FileWatch{dir: p, body: resp.Body, r: bufio.NewReaderSize(resp.Body, 64<<10)}
	ev, err := w.read()
	if err == nil && ev.Type != wire.WatchStart {
		err = fmt.Errorf("watch %s: agent began with %q, not a start", p, ev.Type)
	}
	if err != nil {
		w.Close()
		return nil, err
	}
	return w, nil
}

// Next returns the next event; io.EOF once the agent ended the watch (the
// directory is gone). An error ends the watch.
func (w *FileWatch) Next() (wire.WatchEvent, error) {
	ev, err := w.read()
	if err == nil && ev.Type == wire.WatchStart {
		err = fmt.Errorf("watch %s: a second start from agent", w.dir)
	}
	return ev, err
}

// Close ends the watch.
func (w *FileWatch) Close() error { return w.body.Close() }

func (w *FileWatch) read() (wire.WatchEvent, error) {
	var line []byte
	for {
		chunk, isPrefix, err := w.r.ReadLine()
		if err != nil {
			if err == io.EOF && len(line) == 0 {
				return wire.WatchEvent{}, io.EOF
			}
			return wire.WatchEvent{}, fmt.Errorf("watch %s: %w", w.dir, err)
		}
		if len(line)+len(chunk) > wire.MaxJSON {
			return wire.WatchEvent{}, fmt.Errorf("watch %s: an event from agent is over %d bytes", w.dir, wire.MaxJSON)
		}
		line = append(line, chunk...)
		if !isPrefix {
			break
		}
	}
	var ev wire.WatchEvent
	if err := json.Unmarshal(line, &ev); err != nil {
		return wire.WatchEvent{}, fmt.Errorf("watch %s: bad event from agent: %w", w.dir, err)
	}
	if err := w.check(ev); err != nil {
		return wire.WatchEvent{}, fmt.Errorf("watch %s: %w", w.dir, err)
	}
	return ev, nil
}

// check refuses what the agent cannot have meant: an unknown type, a path
// that is not clean or not under the watched directory, an entry that is
// not the path's.
func (w *FileWatch) check(ev wire.WatchEvent) error {
	switch ev.Type {
	case wire.WatchStart:
		return nil
	case wire.WatchDropped:
		if ev.Count < 1 || ev.Path != "" || ev.Entry != nil {
			return fmt.Errorf("bad dropped record from agent")
		}
		return nil
	case wire.WatchCreate, wire.WatchWrite, wire.WatchRemove, wire.WatchRename, wire.WatchChmod:
	default:
		return fmt.Errorf("bad event type %q from agent", ev.Type)
	}
	if p, err := fspath.Clean(ev.Path); err != nil || p != ev.Path {
		return fmt.Errorf("bad event path %q from agent", ev.Path)
	}
	if ev.Path != w.dir && !strings.HasPrefix(ev.Path, strings.TrimSuffix(w.dir, "/")+"/") {
		return fmt.Errorf("event path %q from agent is not under %s", ev.Path, w.dir)
	}
	if ev.Entry != nil {
		if err := checkFileInfo(*ev.Entry); err != nil {
			return err
		}
		if ev.Entry.Path != ev.Path {
			return fmt.Errorf("event entry %q from agent is not its path %q", ev.Entry.Path, ev.Path)
		}
	}
	return nil
}
