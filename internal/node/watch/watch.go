// Package watch keeps a node's file watches: one journal per watched
// directory of a sandbox (path and recursive), fed by one watch of the
// sandbox's agent and read by any number of readers, each from its own
// sequence number.
//
// A journal numbers its records; it keeps the last Bound of them, so a
// reader that comes back with after=SEQ gets what it missed, and stays
// Keep after its last reader left. A reader that resumes from before what
// is kept gets one dropped record with the count it lost. Records come
// into a journal at most Rate a second: the rest are counted and become
// one dropped record as the next second starts, never coalesced silently.
//
// Sequence numbers go on across journals: a new journal starts at the
// node's clock in microseconds (or past the last number handed out, if
// that is later), so a reader whose journal is gone (kept time over, the
// node restarted, the sandbox moved) is told so by a dropped record of
// count 0: an unknown number lost.
package watch

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/node"
)

// Source is a watch of a sandbox's agent: Next returns its events in
// order (Seq unset), an error once it ended. Close ends it.
type Source interface {
	Next() (api.FileEvent, error)
	Close() error
}

// Opener starts a watch of a sandbox's agent, returning once it is in
// place.
type Opener func(ctx context.Context, sandboxID, path string, recursive bool) (Source, error)

// Config bounds the journals; zero fields take the defaults.
type Config struct {
	// Keep is how long a journal stays after its last reader left (10
	// minutes).
	Keep time.Duration
	// Bound is how many records a journal keeps (4096).
	Bound int
	// Rate is how many events a second come into a journal (1000).
	Rate int
	// MaxPerSandbox bounds the journals of one sandbox (32); each is a
	// watch of its agent.
	MaxPerSandbox int
	// Now is the clock (time.Now).
	Now func() time.Time
}

func (c *Config) defaults() {
	if c.Keep <= 0 {
		c.Keep = 10 * time.Minute
	}
	if c.Bound <= 0 {
		c.Bound = 4096
	}
	if c.Rate <= 0 {
		c.Rate = 1000
	}
	if c.MaxPerSandbox <= 0 {
		c.MaxPerSandbox = 32
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// Journals are a node's watch journals.
type Journals struct {
	cfg  Config
	open Opener
	log  *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu sync.Mutex
	m  map[key]*journal
	// floor is the last sequence number any journal handed out.
	floor atomic.Int64
}

// raise makes the floor at least seq.
func (js *Journals) raise(seq int64) {
	for {
		f := js.floor.Load()
		if f >= seq || js.floor.CompareAndSwap(f, seq) {
			return
		}
	}
}

type key struct {
	sandbox, path string
	recursive     bool
}

// New returns the journals, opening agents' watches with open. Close ends
// them.
func New(cfg Config, open Opener, log *slog.Logger) *Journals {
	cfg.defaults()
	ctx, cancel := context.WithCancel(context.Background())
	js := &Journals{cfg: cfg, open: open, log: log, ctx: ctx, cancel: cancel, m: map[key]*journal{}}
	js.wg.Go(js.sweeper)
	return js
}

// Close ends every journal and waits for their goroutines.
func (js *Journals) Close() {
	js.cancel()
	js.mu.Lock()
	for k, j := range js.m {
		j.stop()
		delete(js.m, k)
	}
	js.mu.Unlock()
	js.wg.Wait()
}

func (js *Journals) sweeper() {
	t := time.NewTicker(time.Minute)
	defer t.Stop()
	for {
		select {
		case <-js.ctx.Done():
			return
		case <-t.C:
			js.Sweep()
		}
	}
}

// Sweep ends the journals nobody has read for Keep and those whose watch
// ended with no reader left.
func (js *Journals) Sweep() {
	now := js.cfg.Now()
	js.mu.Lock()
	defer js.mu.Unlock()
	for k, j := range js.m {
		j.mu.Lock()
		idle := j.readers == 0 && (j.ended || now.Sub(j.idleSince) >= js.cfg.Keep)
		j.mu.Unlock()
		if idle {
			delete(js.m, k)
			j.stop()
		}
	}
}

// Forget ends the journals of a sandbox (it is gone); their readers see
// the end.
func (js *Journals) Forget(sandboxID string) {
	js.mu.Lock()
	defer js.mu.Unlock()
	for k, j := range js.m {
		if k.sandbox == sandboxID {
			delete(js.m, k)
			j.stop()
		}
	}
}

// Watch returns a reader of the journal of spec's directory, starting the
// journal (and its agent's watch) when there is none.
func (js *Journals) Watch(ctx context.Context, sandboxID string, spec node.WatchSpec) (node.FileWatch, error) {
	if spec.After < 0 {
		return nil, api.Errorf(api.CodeInvalidArgument, "after must be 0 or more")
	}
	k := key{sandboxID, spec.Path, spec.Recursive}
	js.mu.Lock()
	if js.ctx.Err() != nil {
		js.mu.Unlock()
		return nil, api.Errorf(api.CodeUnavailable, "the node is stopping")
	}
	j := js.m[k]
	if j != nil && j.isEnded() {
		delete(js.m, k)
		j = nil
	}
	fresh := j == nil
	if fresh {
		n := 0
		for o, oj := range js.m {
			if o.sandbox == sandboxID && !oj.isEnded() {
				n++
			}
		}
		if n >= js.cfg.MaxPerSandbox {
			js.mu.Unlock()
			return nil, api.Errorf(api.CodeResourceExhausted, "this sandbox has %d watched directories, the most allowed; watch a common parent recursively, or close a watch and retry in %s", n, js.cfg.Keep)
		}
		j = &journal{js: js, key: k, ready: make(chan struct{}), changed: make(chan struct{}), done: make(chan struct{})}
		js.m[k] = j
	}
	j.mu.Lock()
	j.readers++
	j.mu.Unlock()
	js.mu.Unlock()

	if fresh {
		j.start(ctx)
	}
	select {
	case <-j.ready:
	case <-ctx.Done():
		j.release()
		return nil, ctx.Err()
	}
	if j.openErr != nil {
		j.release()
		return nil, j.openErr
	}
	j.mu.Lock()
	after := spec.After
	if after == 0 {
		after = j.last
	}
	j.mu.Unlock()
	return &reader{j: j, after: after}, nil
}

// journal is one watched directory's records.
type journal struct {
	js  *Journals
	key key

	ready   chan struct{} // closed once the source is open (or failed: openErr)
	openErr error
	src     Source
	done    chan struct{} // closed by stop
	once    sync.Once

	mu        sync.Mutex
	events    []api.FileEvent // the kept records, contiguous, oldest first
	base      int64           // the number before the journal's first
	last      int64
	changed   chan struct{} // closed and replaced at each new record
	readers   int
	idleSince time.Time
	ended     bool
	// The rate: records taken in the second that began at window, and
	// the events counted past it.
	window   time.Time
	inWindow int
	pending  int64
	flusher  *time.Timer
}

func (j *journal) isEnded() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.ended
}

// start opens the source and runs the journal's reading goroutine.
func (j *journal) start(ctx context.Context) {
	src, err := j.js.open(ctx, j.key.sandbox, j.key.path, j.key.recursive)
	js := j.js
	js.mu.Lock()
	if err == nil && js.ctx.Err() != nil {
		src.Close()
		err = api.Errorf(api.CodeUnavailable, "the node is stopping")
	}
	now := js.cfg.Now()
	j.base = max(now.UnixMicro(), js.floor.Load()+1)
	j.last = j.base
	js.raise(j.base)
	if err != nil {
		j.openErr = err
		j.ended = true
		if js.m[j.key] == j {
			delete(js.m, j.key)
		}
		js.mu.Unlock()
		close(j.ready)
		return
	}
	j.src = src
	js.wg.Go(j.run)
	js.mu.Unlock()
	close(j.ready)
}

// stop ends the journal's source; its goroutine ends the journal.
func (j *journal) stop() {
	j.once.Do(func() {
		close(j.done)
		if j.src != nil {
			j.src.Close()
		}
	})
}

func (j *journal) run() {
	for {
		ev, err := j.src.Next()
		if err != nil {
			if !errors.Is(err, io.EOF) && j.js.ctx.Err() == nil {
				select {
				case <-j.done:
				default:
					j.js.log.Debug("file watch ended", "sandbox", j.key.sandbox, "path", j.key.path, "err", err)
				}
			}
			j.mu.Lock()
			j.ended = true
			if j.flusher != nil {
				j.flusher.Stop()
			}
			if j.pending > 0 {
				j.append(api.FileEvent{Type: api.FileDropped, Count: j.pending})
				j.pending = 0
			}
			j.notify()
			j.mu.Unlock()
			j.stop()
			return
		}
		j.add(ev)
	}
}

// add takes an event of the source, within the rate.
func (j *journal) add(ev api.FileEvent) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if ev.Type == api.FileDropped {
		j.append(ev)
		return
	}
	now := j.js.cfg.Now()
	if now.Sub(j.window) >= time.Second {
		j.window, j.inWindow = now, 0
		j.flushPending()
	}
	if j.inWindow < j.js.cfg.Rate {
		j.inWindow++
		j.append(ev)
		return
	}
	j.pending++
	if j.flusher == nil {
		j.flusher = time.AfterFunc(j.window.Add(time.Second).Sub(now), j.flushLater)
	}
}

// flushLater reports the events counted past the rate once their second
// is over, when no event came to do it.
func (j *journal) flushLater() {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.flusher = nil
	if j.ended {
		return
	}
	j.flushPending()
}

func (j *journal) flushPending() {
	if j.pending > 0 {
		j.append(api.FileEvent{Type: api.FileDropped, Count: j.pending})
		j.pending = 0
	}
}

// append numbers a record and keeps it. Called with j.mu held.
func (j *journal) append(ev api.FileEvent) {
	j.last++
	ev.Seq = j.last
	j.events = append(j.events, ev)
	if bound := j.js.cfg.Bound; len(j.events) > bound {
		if len(j.events) >= 2*bound {
			j.events = append([]api.FileEvent(nil), j.events[len(j.events)-bound:]...)
		} else {
			j.events = j.events[len(j.events)-bound:]
		}
	}
	j.js.raise(j.last)
	j.notify()
}

func (j *journal) notify() {
	close(j.changed)
	j.changed = make(chan struct{})
}

func (j *journal) release() {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.readers--
	if j.readers == 0 {
		j.idleSince = j.js.cfg.Now()
	}
}

// reader is one reader of a journal.
type reader struct {
	j      *journal
	after  int64
	closed sync.Once
}

func (r *reader) Close() { r.closed.Do(r.j.release) }

func (r *reader) Next(ctx context.Context) (api.FileEvent, error) {
	j := r.j
	for {
		j.mu.Lock()
		first := j.last - int64(len(j.events)) + 1
		switch {
		case r.after < j.base:
			// From a journal that is gone: how much was lost is unknown.
			r.after = j.base
			j.mu.Unlock()
			return api.FileEvent{Seq: r.after, Type: api.FileDropped}, nil
		case r.after < first-1:
			lost := first - 1 - r.after
			r.after = first - 1
			j.mu.Unlock()
			return api.FileEvent{Seq: r.after, Type: api.FileDropped, Count: lost}, nil
		case r.after < j.last:
			ev := j.events[r.after-first+1]
			r.after = ev.Seq
			j.mu.Unlock()
			return ev, nil
		case j.ended:
			j.mu.Unlock()
			return api.FileEvent{}, io.EOF
		}
		changed := j.changed
		j.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return api.FileEvent{}, ctx.Err()
		}
	}
}
