package remote

import (
	"bufio"
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
	"github.com/cove-dev/cove/internal/node/nodeapi"
)

// Output opens a command's recorded output on the node. The Output holds
// a stream of the node's record of it (its last sequence number, sizes
// and exit) until Close; a node that goes away ends it, and the output
// then counts as ended.
func (c *Client) Output(sandboxID, commandID string) (node.Output, error) {
	ctx, cancel := context.WithCancel(c.ctx)
	q := url.Values{"sandbox": {sandboxID}, "command": {commandID}}
	return &output{c: c, q: q, ctx: ctx, cancel: cancel, changed: make(chan struct{}), done: make(chan struct{})}, nil
}

// watchStart opens the stream of the node's record at the first call that
// needs it (a Read or a Stream alone needs none: a command waited for
// costs no round trip more than on one host).
func (o *output) watchStart() {
	o.once.Do(func() {
		resp, err := o.c.do(o.ctx, request{method: http.MethodGet, path: "output/watch", query: o.q})
		var dec *json.Decoder
		if err == nil {
			dec = json.NewDecoder(bufio.NewReader(resp.Body))
			var st nodeapi.OutputState
			if err = dec.Decode(&st); err != nil {
				resp.Body.Close()
			} else {
				o.mu.Lock()
				o.st = st
				o.mu.Unlock()
			}
		}
		if err != nil {
			o.mu.Lock()
			o.lost = true
			o.mu.Unlock()
			close(o.done)
			return
		}
		o.c.wg.Add(1)
		go func() {
			defer o.c.wg.Done()
			defer close(o.done)
			defer resp.Body.Close()
			o.watch(dec)
		}()
	})
}

// output is a command's output on a node.
type output struct {
	c      *Client
	q      url.Values
	ctx    context.Context
	cancel context.CancelFunc
	// once opens the watch (watchStart); done is closed when it ends.
	once sync.Once
	done chan struct{}

	mu      sync.Mutex
	st      nodeapi.OutputState
	lost    bool // the stream of the node's record broke
	changed chan struct{}
}

// watch takes the node's record as it changes until the command ends or
// the stream breaks.
func (o *output) watch(dec *json.Decoder) {
	for {
		var st nodeapi.OutputState
		err := dec.Decode(&st)
		o.mu.Lock()
		if err != nil {
			o.lost = !o.st.Ended
		} else {
			o.st = st
		}
		close(o.changed)
		o.changed = make(chan struct{})
		o.mu.Unlock()
		if err != nil {
			return
		}
	}
}

// Close ends the output's stream.
func (o *output) Close() error {
	o.cancel()
	o.once.Do(func() { close(o.done) }) // never opened: nothing to wait for
	<-o.done
	return nil
}

// Read streams the chunks after `after` from the node, following as asked.
func (o *output) Read(ctx context.Context, after int64, follow bool, fn func(node.Chunk) error) (*node.Exit, error) {
	q := url.Values{"after": {strconv.FormatInt(after, 10)}, "follow": {strconv.FormatBool(follow)}}
	for k, v := range o.q {
		q[k] = v
	}
	resp, err := o.c.do(ctx, request{method: http.MethodGet, path: "output/read", query: q})
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(bufio.NewReader(resp.Body))
	for {
		var line nodeapi.OutputLine
		if err := dec.Decode(&line); err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF // the node's answer always ends with Done
			}
			return nil, o.c.transportErr(ctx, err)
		}
		switch {
		case line.Chunk != nil:
			if err := fn(*line.Chunk); err != nil {
				return nil, err
			}
		case line.Error != nil && line.Error.Code == api.CodeInternal:
			return nil, fmt.Errorf("node %s: %s", o.c.cfg.NodeID, line.Error.Message)
		case line.Error != nil:
			return nil, line.Error
		case line.Done:
			return line.Exit, nil
		}
	}
}

// Stream is a raw stream of the output, read from the node in ranges.
func (o *output) Stream(name string) (io.ReaderAt, int64, error) {
	r := &streamReader{o: o, name: name}
	_, size, err := r.read(0, 0)
	if err != nil {
		return nil, 0, err
	}
	return r, size, nil
}

// streamReader reads a range of an output's stream per call.
type streamReader struct {
	o    *output
	name string
}

func (r *streamReader) read(off int64, n int) ([]byte, int64, error) {
	q := url.Values{"name": {r.name}, "off": {strconv.FormatInt(off, 10)}, "n": {strconv.Itoa(n)}}
	for k, v := range r.o.q {
		q[k] = v
	}
	ctx, cancel := context.WithTimeout(r.o.c.ctx, quickCall)
	defer cancel()
	resp, err := r.o.c.do(ctx, request{method: http.MethodGet, path: "output/stream", query: q})
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	size, err := strconv.ParseInt(resp.Header.Get(nodeapi.SizeHeader), 10, 64)
	if err != nil {
		return nil, 0, r.o.c.unavailable(fmt.Errorf("no stream size in the answer"))
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, int64(n)))
	if err != nil {
		return nil, 0, r.o.c.transportErr(ctx, err)
	}
	return b, size, nil
}

// ReadAt implements io.ReaderAt.
func (r *streamReader) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, errors.New("negative offset")
	}
	b, _, err := r.read(off, len(p))
	if err != nil {
		return 0, err
	}
	n := copy(p, b)
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// LastSeq is the sequence number of the last chunk the node recorded.
func (o *output) LastSeq() int64 {
	o.watchStart()
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.st.LastSeq
}

// Sizes are the bytes the node recorded on each stream.
func (o *output) Sizes() (stdout, stderr int64) {
	o.watchStart()
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.st.Stdout, o.st.Stderr
}

// Exit is the recorded exit, nil while the command runs.
func (o *output) Exit() *node.Exit {
	o.watchStart()
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.st.Exit == nil {
		return nil
	}
	e := *o.st.Exit
	return &e
}

// Ended reports that the exit is recorded, the log was closed, or the
// node's record can no longer be followed (the node went away).
func (o *output) Ended() bool {
	o.watchStart()
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.st.Ended || o.lost
}

// Changed is closed at the next change of the node's record.
func (o *output) Changed() <-chan struct{} {
	o.watchStart()
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.changed
}
