package guest

import (
	"sync"
	"time"

	"github.com/cove-dev/cove/internal/agent/wire"
)

// outputBuffer holds the frames of one command that the host has not yet
// acknowledged. It is bounded: producers block while it is full, which
// blocks the command's writes (back-pressure) instead of dropping output.
type outputBuffer struct {
	max int // FrameCost of the frames held before producers block
	// onWait, when not nil, is called each time a write starts waiting
	// for space, without the lock: tests observe back-pressure with it.
	onWait func()

	mu      sync.Mutex
	frames  []wire.Frame  // seqs acked+1 … acked+len(frames)
	acked   int64         // highest acknowledged seq
	size    int           // FrameCost of frames
	ended   bool          // the exit frame is in
	aborted bool          // producers give up (the server is closing)
	changed chan struct{} // closed and replaced on every change
}

func newOutputBuffer(max int) *outputBuffer {
	return &outputBuffer{max: max, changed: make(chan struct{})}
}

// broadcast wakes everyone waiting on changed. Callers hold mu.
func (b *outputBuffer) broadcast() {
	close(b.changed)
	b.changed = make(chan struct{})
}

func (b *outputBuffer) lastSeqLocked() int64 { return b.acked + int64(len(b.frames)) }

func (b *outputBuffer) lastSeq() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.lastSeqLocked()
}

func (b *outputBuffer) isEnded() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.ended
}

// buffered reports the FrameCost held.
func (b *outputBuffer) buffered() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.size
}

// frameBufs holds read buffers of MaxFrameData bytes. A read that fills
// much of one becomes a frame's data as it is, without a copy, and the
// buffer comes back here when the host acknowledges the frame: the host
// acknowledges what it has recorded, so a stream still writing it (one
// overtaken by another reader) sends bytes the recorder ignores.
var frameBufs = sync.Pool{New: func() any { return new([wire.MaxFrameData]byte) }}

// newFrameBuf returns a read buffer of MaxFrameData bytes.
func newFrameBuf() []byte { return frameBufs.Get().(*[wire.MaxFrameData]byte)[:] }

// ownWhole is the least a read keeps as a frame's own buffer: a shorter
// one is copied out, so a frame never holds more than 4/3 of its bytes
// and the buffer's bound (in FrameCost, of the bytes) stays close to the
// memory it holds. A command that outruns the agent fills its reads.
const ownWhole = wire.MaxFrameData * 3 / 4

// take appends buf[:n] (buf from newFrameBuf) as one frame of kind, as
// write does, and reports the buffer to read into next: buf again when
// the frame took a copy, a fresh one when it took buf itself.
func (b *outputBuffer) take(kind byte, buf []byte, n int) ([]byte, time.Duration, bool) {
	if n < ownWhole {
		waited, ok := b.write(kind, buf[:n])
		return buf, waited, ok
	}
	waited, ok := b.append(wire.Frame{Kind: kind, Data: buf[:n]}) // its cap says it goes back to frameBufs
	return newFrameBuf(), waited, ok
}

// write appends a copy of data as one frame of kind (len(data) <=
// MaxFrameData), waiting while the buffer is full. It reports how long it
// waited, and false when the buffer was aborted or ended (the data is then
// discarded).
func (b *outputBuffer) write(kind byte, data []byte) (time.Duration, bool) {
	return b.append(wire.Frame{Kind: kind, Data: append([]byte(nil), data...)})
}

// append appends f, which it owns, waiting while the buffer is full.
func (b *outputBuffer) append(f wire.Frame) (time.Duration, bool) {
	cost := wire.FrameCost(f)
	var start time.Time
	b.mu.Lock()
	defer b.mu.Unlock()
	for !b.aborted && !b.ended && b.size > 0 && b.size+cost > b.max {
		if start.IsZero() {
			start = time.Now()
		}
		ch := b.changed
		b.mu.Unlock()
		if b.onWait != nil {
			b.onWait()
		}
		<-ch
		b.mu.Lock()
	}
	var waited time.Duration
	if !start.IsZero() {
		waited = time.Since(start)
	}
	if b.aborted || b.ended {
		return waited, false
	}
	b.appendLocked(f)
	return waited, true
}

func (b *outputBuffer) appendLocked(f wire.Frame) {
	f.Seq = b.lastSeqLocked() + 1
	b.frames = append(b.frames, f)
	b.size += wire.FrameCost(f)
	b.broadcast()
}

// finish appends the exit frame, whatever the space, and ends the buffer.
func (b *outputBuffer) finish(exit []byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ended {
		return
	}
	b.appendLocked(wire.Frame{Kind: wire.FrameExit, Data: exit})
	b.ended = true
}

// abort makes every waiting and future write give up.
func (b *outputBuffer) abort() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.aborted = true
	b.broadcast()
}

// ack forgets the frames up to seq. Acknowledging what is already
// acknowledged is fine; seq below the acknowledged point is a conflict (those
// frames are gone) and seq beyond the last frame is invalid.
func (b *outputBuffer) ack(seq int64) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.checkLocked(seq); err != nil {
		return err
	}
	n := int(seq - b.acked)
	if n == 0 {
		return nil
	}
	for i := range n {
		b.size -= wire.FrameCost(b.frames[i])
		if d := b.frames[i].Data; cap(d) == wire.MaxFrameData && b.frames[i].Kind != wire.FrameExit {
			frameBufs.Put((*[wire.MaxFrameData]byte)(d[:cap(d)]))
		}
		b.frames[i] = wire.Frame{} // let the data go now
	}
	b.frames = b.frames[n:]
	if len(b.frames) == 0 {
		b.frames = nil // drop the backing array
	}
	b.acked = seq
	b.broadcast()
	return nil
}

func (b *outputBuffer) checkLocked(after int64) error {
	if after < 0 {
		return errorf(400, wire.CodeInvalidArgument, "after %d is negative", after)
	}
	if after < b.acked {
		return errorf(409, wire.CodeConflict, "output before seq %d was already acknowledged", b.acked+1)
	}
	if last := b.lastSeqLocked(); after > last {
		return errorf(400, wire.CodeInvalidArgument, "after %d is beyond the last frame %d", after, last)
	}
	return nil
}

// next returns copies of up to max frames after seq `after`. With none
// available yet it returns a channel that is closed on the next change.
// done says the exit frame is the last of the frames returned, or that
// after already is the exit frame.
func (b *outputBuffer) next(after int64, max int) (frames []wire.Frame, done bool, wait <-chan struct{}, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.checkLocked(after); err != nil {
		return nil, false, nil, err
	}
	i := int(after - b.acked)
	rest := b.frames[i:]
	if len(rest) > max {
		rest = rest[:max]
	}
	frames = append([]wire.Frame(nil), rest...)
	done = b.ended && after+int64(len(frames)) == b.lastSeqLocked()
	return frames, done, b.changed, nil
}
