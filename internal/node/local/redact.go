package local

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/cove-dev/cove/internal/agent/wire"
	"github.com/cove-dev/cove/internal/node"
	"github.com/cove-dev/cove/internal/node/output"
	"github.com/cove-dev/cove/internal/secrets"
)

// Secret values never reach recorded output: each recorder passes its
// command's output through redactors before the log sees it, so
// everything read back (NDJSON, raw streams, attach, ?wait=) is redacted,
// and nothing unredacted is ever on disk. The values are the sandbox's:
// every secret given to any of its commands (a value one command wrote to
// a file may be printed by another), kept in memory only and given again
// by the control plane at wake and reattach.
//
// A pipe's two streams go first through one redactor over their
// interleaving, in the order the agent read them (a value printed half on
// stdout, half on stderr), then through one per stream (a value on stdout
// with stderr output between its pieces). Held bytes go out when what
// follows shows they begin no value, or when the command ends. A
// terminal has one stream; what it holds also goes out ptyFlushDelay after
// the last output that kept it held, so that a prompt that happens to end
// like the start of a value does not stall, but only while it is shorter
// than secrets.KeepPartial bytes: a longer part of a value stays held
// however long the pause (a token printed in two pieces a minute apart),
// till more output or the command's end. Its redactor keeps matching
// across a release, so the rest of a value completed later is still
// hidden: at most KeepPartial-1 bytes of a value are ever recorded.

// ptyFlushDelay is how long a terminal's output that ends with a short
// part of a value (under secrets.KeepPartial bytes) may be held back after
// the last output that continued it: long enough for a value's first bytes
// printed apart from the rest (typed, or written as it is computed), short
// enough that a prompt that happens to end in a value's first letter shows
// within a second.
const ptyFlushDelay = time.Second

// ptyMarker names a file beside a PTY command's output log, so that a
// restarted node knows to flush its held output on time.
const ptyMarker = "pty"

// secretSet is the values given to one sandbox; it only grows.
type secretSet struct {
	mu      sync.Mutex
	version int
	list    []secrets.Secret
	seen    map[string]bool
}

func (s *secretSet) add(given []node.Secret) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seen == nil {
		s.seen = map[string]bool{}
	}
	for _, g := range given {
		if len(g.Value) < secrets.MinRedactLen || s.seen[g.Value] {
			continue
		}
		s.seen[g.Value] = true
		s.list = append(s.list, secrets.Secret{Name: g.Name, Value: g.Value})
		s.version++
	}
}

func (s *secretSet) snapshot(known int) ([]secrets.Secret, int, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.version == known {
		return nil, known, false
	}
	return append([]secrets.Secret(nil), s.list...), s.version, true
}

// redacting takes a command's frames from the agent into its log through
// its redactors. Its methods are safe for concurrent use: the recorder
// and, for a terminal, the flusher call them.
type redacting struct {
	l   *output.Log
	set *secretSet
	pty bool
	// kick tells the flusher that a terminal's output is held.
	kick chan struct{}

	mu      sync.Mutex
	version int
	// mixed sees both streams in the order they came (pipes only: a
	// terminal has one stream); red sees each stream alone.
	mixed *secrets.Redactor
	red   [2]*secrets.Redactor
	// due is when a terminal's held output goes out.
	due      time.Time
	agentSeq int64 // the agent's last frame taken in
	// runs is what the redactors let out for one frame, in order: each a
	// stream and its bytes in buf.
	runs []run
	buf  []byte
}

type run struct {
	kind     byte
	from, to int
}

func newRedacting(l *output.Log, set *secretSet, pty bool) *redacting {
	w := &redacting{l: l, set: set, pty: pty, kick: make(chan struct{}, 1), agentSeq: l.ResumeSeq()}
	for i := range w.red {
		w.red[i] = secrets.NewRedactor(nil, pty)
	}
	if !pty {
		w.mixed = secrets.NewRedactor(nil, false)
	}
	return w
}

// resumeAfter is the agent's sequence number to resume its stream after.
func (w *redacting) resumeAfter() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.agentSeq
}

// refresh gives the redactors the sandbox's values when it was given new
// ones. w.mu is held.
func (w *redacting) refresh() {
	list, v, changed := w.set.snapshot(w.version)
	if !changed {
		return
	}
	w.version = v
	if w.mixed != nil {
		w.mixed.Reset(list, false)
	}
	for _, r := range w.red {
		r.Reset(list, w.pty)
	}
}

// collect notes bytes let out on stream kind (1 stdout, 2 stderr).
func (w *redacting) collect(kind byte, b []byte) {
	if n := len(w.runs); n > 0 && w.runs[n-1].kind == kind {
		w.buf = append(w.buf, b...)
		w.runs[n-1].to = len(w.buf)
		return
	}
	from := len(w.buf)
	w.buf = append(w.buf, b...)
	w.runs = append(w.runs, run{kind, from, len(w.buf)})
}

// stream passes bytes of stream kind through that stream's own redactor.
func (w *redacting) stream(kind byte, b []byte) {
	w.red[kind-1].WriteFrom(kind, b, w.collect)
}

// held reports whether any redactor holds bytes back.
func (w *redacting) held() bool {
	return (w.mixed != nil && w.mixed.Held() > 0) || w.red[0].Held() > 0 || w.red[1].Held() > 0
}

// frame takes in one frame from the agent.
func (w *redacting) frame(f wire.Frame) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if f.Seq <= w.agentSeq {
		return nil // resent after a break; taken in already
	}
	w.refresh()
	switch f.Kind {
	case wire.FrameStdout, wire.FrameStderr:
		if w.version == 0 && !w.held() {
			// The sandbox was given no secret (yet): the redactors
			// would let the frame out whole, so it goes in as it
			// came, not copied through them.
			break
		}
		w.runs, w.buf = w.runs[:0], w.buf[:0]
		if w.mixed != nil {
			w.mixed.WriteFrom(f.Kind, f.Data, w.stream)
		} else {
			w.stream(f.Kind, f.Data)
		}
		// Bytes of the other stream, or held from before, go in before
		// this frame, in the order they came; the frame keeps the last
		// run when it is of its own stream.
		last := len(w.runs) - 1
		f.Data = nil
		if last >= 0 && w.runs[last].kind == f.Kind {
			f.Data = w.buf[w.runs[last].from:w.runs[last].to]
			w.runs = w.runs[:last]
		}
		if err := w.insertRuns(); err != nil {
			return err
		}
		if w.pty && w.held() {
			w.due = time.Now().Add(ptyFlushDelay)
			select {
			case w.kick <- struct{}{}:
			default:
			}
		}
	case wire.FrameExit:
		// What is held goes out before the exit: it begins no secret
		// that could still end.
		if err := w.flushLocked(); err != nil {
			return err
		}
	case wire.FrameDropped:
		// Output was lost here: held bytes (the start of what may be a
		// secret, now cut) are dropped rather than shown.
		if w.mixed != nil {
			w.mixed.Flush(nil)
		}
		for _, r := range w.red {
			r.Flush(nil)
		}
	}
	if err := w.l.Append(f); err != nil {
		return err
	}
	w.agentSeq = f.Seq
	return nil
}

// insertRuns records the runs collected as chunks of the node's own.
func (w *redacting) insertRuns() error {
	for _, r := range w.runs {
		if !w.l.CanInsert() {
			break // a log that took its most inserts: dropped, never shown
		}
		if _, err := w.l.Insert(r.kind, w.buf[r.from:r.to]); err != nil {
			return err
		}
	}
	w.runs = w.runs[:0]
	return nil
}

// flushLocked lets every held byte out (the command ended). w.mu is held.
func (w *redacting) flushLocked() error {
	w.runs, w.buf = w.runs[:0], w.buf[:0]
	if w.mixed != nil {
		w.mixed.FlushTo(w.stream)
	}
	for _, r := range w.red {
		r.FlushTo(w.collect)
	}
	return w.insertRuns()
}

// release lets a terminal's held output out once it is due, and reports
// when to look again (zero when nothing is held, or what is held is a part
// of a value too long to let out: the next frame looks again).
func (w *redacting) release(now time.Time) (time.Time, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.held() {
		return time.Time{}, nil
	}
	if now.Before(w.due) {
		return w.due, nil
	}
	w.runs, w.buf = w.runs[:0], w.buf[:0]
	for _, r := range w.red {
		// A short held tail goes out, a longer part of a value stays;
		// matching goes on: the rest of a value is still hidden.
		r.Release(w.collect)
	}
	return time.Time{}, w.insertRuns()
}

// flushTerminal lets a terminal's held output out ptyFlushDelay after the
// last output that kept it held, until ctx ends.
func (w *redacting) flushTerminal(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.kick:
		}
		for {
			next, err := w.release(time.Now())
			if err != nil || next.IsZero() {
				break
			}
			t := time.NewTimer(time.Until(next))
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
	}
}

// markPTY marks the command whose output log is at path (see
// output.Open): a file path.pty beside the log's files, or, in a log of
// an earlier version (a directory), the file pty in it.
func markPTY(path string) error {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return os.WriteFile(filepath.Join(path, ptyMarker), nil, 0o600)
	}
	return os.WriteFile(path+"."+ptyMarker, nil, 0o600)
}

func isPTY(path string) bool {
	for _, p := range []string{path + "." + ptyMarker, filepath.Join(path, ptyMarker)} {
		if _, err := os.Stat(p); err == nil {
			return true
		}
	}
	return false
}
