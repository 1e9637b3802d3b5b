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
// command's output through a redactor per stream before the log sees it,
// so everything read back (NDJSON, raw streams, attach, ?wait=) is
// redacted, and nothing unredacted is ever on disk. The values are the
// sandbox's: every secret given to any of its commands (a value one
// command wrote to a file may be printed by another), kept in memory only
// and given again by the control plane at wake and reattach.

// ptyFlushDelay is how long a terminal's output may be held back, waiting
// to see whether it completes a secret, before it is let out as it is: a
// terminal must not stall on a prompt that happens to begin a value.
const ptyFlushDelay = 100 * time.Millisecond

// ptyMarker is a file in a PTY command's output dir, so that a restarted
// node knows to flush its held output on time.
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
// a redactor per stream. Its methods are safe for concurrent use: the
// recorder and, for a terminal, the flusher call them.
type redacting struct {
	l   *output.Log
	set *secretSet
	pty bool
	// kick asks the flusher to let held output out after ptyFlushDelay.
	kick chan struct{}

	mu       sync.Mutex
	version  int
	red      [2]*secrets.Redactor
	agentSeq int64 // the agent's last frame taken in
	buf      []byte
}

func newRedacting(l *output.Log, set *secretSet, pty bool) *redacting {
	return &redacting{l: l, set: set, pty: pty, kick: make(chan struct{}, 1), agentSeq: l.ResumeSeq()}
}

// resumeAfter is the agent's sequence number to resume its stream after.
func (w *redacting) resumeAfter() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.agentSeq
}

// refresh rebuilds the redactors when the sandbox was given new values.
// w.mu is held.
func (w *redacting) refresh() {
	list, v, changed := w.set.snapshot(w.version)
	if !changed {
		return
	}
	w.version = v
	for i := range w.red {
		if w.red[i] == nil {
			w.red[i] = secrets.NewRedactor(list, w.pty)
		} else {
			w.red[i].Reset(list, w.pty)
		}
	}
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
		r := w.red[f.Kind-1]
		if r != nil && (!r.Empty() || r.Held() > 0) {
			w.buf = r.Write(w.buf[:0], f.Data)
			f.Data = w.buf
			if r.Held() > 0 && w.pty {
				select {
				case w.kick <- struct{}{}:
				default:
				}
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
		for _, r := range w.red {
			if r != nil {
				r.Flush(nil)
			}
		}
	}
	if err := w.l.Append(f); err != nil {
		return err
	}
	w.agentSeq = f.Seq
	return nil
}

// flush lets held output out now (a terminal's, after ptyFlushDelay).
func (w *redacting) flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.flushLocked()
}

func (w *redacting) flushLocked() error {
	for i, r := range w.red {
		if r == nil || r.Held() == 0 {
			continue
		}
		if !w.l.CanInsert() {
			r.Flush(nil) // a log that took its most inserts: dropped, never shown
			continue
		}
		w.buf = r.Flush(w.buf[:0])
		if _, err := w.l.Insert(byte(i+1), w.buf); err != nil {
			return err
		}
	}
	return nil
}

// flushTerminal lets a terminal's held output out ptyFlushDelay after it
// was held, until ctx ends.
func (w *redacting) flushTerminal(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.kick:
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(ptyFlushDelay):
		}
		if err := w.flush(); err != nil {
			return
		}
	}
}

func markPTY(dir string) error {
	return os.WriteFile(filepath.Join(dir, ptyMarker), nil, 0o600)
}

func isPTY(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, ptyMarker))
	return err == nil
}
