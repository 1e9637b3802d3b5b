package guest

import (
	"errors"
	"testing"

	"github.com/cove-dev/cove/internal/agent/wire"
)

func TestOutputBufferAck(t *testing.T) {
	b := newOutputBuffer(minMaxBuffer)
	for _, s := range []string{"a", "b", "c"} {
		if _, ok := b.write(wire.FrameStdout, []byte(s)); !ok {
			t.Fatal("write refused")
		}
	}
	b.finish([]byte(`{"exit_code":0}`))

	tests := []struct {
		name   string
		after  int64
		seqs   []int64
		done   bool
		status int // of the error; 0: none
	}{
		{"all", 0, []int64{1, 2, 3, 4}, true, 0},
		{"middle", 2, []int64{3, 4}, true, 0},
		{"at exit", 4, nil, true, 0},
		{"beyond", 5, nil, false, 400},
		{"negative", -1, nil, false, 400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			frames, done, _, err := b.next(tt.after, 10)
			if tt.status != 0 {
				var e *Error
				if !errors.As(err, &e) || e.Status != tt.status {
					t.Fatalf("err %v, want status %d", err, tt.status)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var seqs []int64
			for _, f := range frames {
				seqs = append(seqs, f.Seq)
			}
			if len(seqs) != len(tt.seqs) || done != tt.done {
				t.Fatalf("seqs %v done %v, want %v %v", seqs, done, tt.seqs, tt.done)
			}
			for i := range seqs {
				if seqs[i] != tt.seqs[i] {
					t.Fatalf("seqs %v, want %v", seqs, tt.seqs)
				}
			}
		})
	}

	if err := b.ack(2); err != nil {
		t.Fatal(err)
	}
	if err := b.ack(2); err != nil {
		t.Errorf("acknowledging again: %v", err)
	}
	if _, _, _, err := b.next(1, 10); err == nil {
		t.Error("next before the acknowledged point succeeded")
	}
	if got, want := b.buffered(), 2*wire.FrameCost(wire.Frame{})+1+len(`{"exit_code":0}`); got != want {
		t.Errorf("buffered %d, want %d", got, want)
	}
	if err := b.ack(4); err != nil || b.buffered() != 0 || b.lastSeq() != 4 {
		t.Errorf("after acking all: %v, %d buffered, last %d", err, b.buffered(), b.lastSeq())
	}
}

// TestOutputBufferBackPressure checks the order of events, not their timing:
// a write into a full buffer is seen waiting and does not return until a
// reader acknowledges (or the buffer is aborted).
func TestOutputBufferBackPressure(t *testing.T) {
	b := newOutputBuffer(minMaxBuffer)
	waiting := make(chan struct{}, 1)
	b.onWait = func() {
		select {
		case waiting <- struct{}{}:
		default:
		}
	}
	chunk := make([]byte, wire.MaxFrameData)
	cost := wire.FrameCost(wire.Frame{Data: chunk})
	n := 0
	for b.buffered()+cost <= minMaxBuffer {
		if _, ok := b.write(wire.FrameStdout, chunk); !ok {
			t.Fatal("write refused")
		}
		n++
	}
	select {
	case <-waiting:
		t.Fatal("a write waited before the buffer was full")
	default:
	}
	full := b.buffered()

	type result struct{ ok bool }
	wrote := make(chan result, 1)
	go func() {
		_, ok := b.write(wire.FrameStderr, chunk)
		wrote <- result{ok}
	}()
	<-waiting // the writer found the buffer full and waits
	select {
	case r := <-wrote:
		t.Fatalf("write into a full buffer returned %+v without an ack", r)
	default:
	}
	if got := b.buffered(); got != full || b.lastSeq() != int64(n) {
		t.Fatalf("while the writer waits: %d buffered, last seq %d; want %d, %d", got, b.lastSeq(), full, n)
	}
	if err := b.ack(1); err != nil {
		t.Fatal(err)
	}
	if r := <-wrote; !r.ok {
		t.Fatal("write refused after the ack")
	}
	if got := b.lastSeq(); got != int64(n+1) {
		t.Errorf("last seq %d, want %d", got, n+1)
	}

	// abort frees a waiting writer, which then gives up.
	go func() {
		_, ok := b.write(wire.FrameStdout, chunk)
		wrote <- result{ok}
	}()
	<-waiting
	b.abort()
	if r := <-wrote; r.ok {
		t.Error("write after abort succeeded")
	}
	// The exit frame goes in whatever the space.
	b.finish(nil)
	if !b.isEnded() || b.lastSeq() != int64(n+2) {
		t.Errorf("ended %v last %d", b.isEnded(), b.lastSeq())
	}
}
