package guest

import (
	"bytes"
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cove-dev/cove/internal/agent/wire"
)

// TestTakenBuffersKeepTheirBytesUntilAcknowledged takes reads as the
// command reader does (full ones as the frame's own buffer, short ones
// copied), acknowledging some as it goes so buffers come back for reuse:
// every frame not yet acknowledged still holds the bytes read into it,
// and none holds a whole buffer for less than three quarters of it.
func TestTakenBuffersKeepTheirBytesUntilAcknowledged(t *testing.T) {
	b := newOutputBuffer(64 * wire.MaxFrameData)
	buf := newFrameBuf()
	var want [][]byte
	for i := range 200 {
		n := wire.MaxFrameData - i
		switch i % 3 {
		case 0:
			n = 1 + i // short: copied out
		case 1:
			n = wire.MaxFrameData/2 + i // half full: copied out too
		}
		for j := range n {
			buf[j] = byte(i + j)
		}
		want = append(want, bytes.Clone(buf[:n]))
		next, _, ok := b.take(wire.FrameStdout, buf, n)
		if !ok {
			t.Fatal("take refused")
		}
		if n >= ownWhole && &next[0] == &buf[0] {
			t.Fatalf("read %d: the buffer handed to the frame is read into again", i)
		}
		buf = next
		if i%10 == 9 { // the host acknowledges all but the last 5
			if err := b.ack(int64(i + 1 - 5)); err != nil {
				t.Fatal(err)
			}
		}
		frames, _, _, err := b.next(b.acked, 1000)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range frames {
			if !bytes.Equal(f.Data, want[f.Seq-1]) {
				t.Fatalf("read %d: frame %d (not acknowledged) no longer holds what was read into it", i, f.Seq)
			}
			if cap(f.Data) == wire.MaxFrameData && len(f.Data)*4 < wire.MaxFrameData*3 {
				t.Fatalf("frame %d of %d bytes holds %d", f.Seq, len(f.Data), cap(f.Data))
			}
		}
	}
}

// TestOutputPipesAreGrown checks that a command's output pipe holds
// outputPipeSize, so a fast writer fills more of it between the agent's
// reads.
func TestOutputPipesAreGrown(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	growPipe(r)
	rc, err := r.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	size := 0
	rc.Control(func(fd uintptr) { size, err = unix.FcntlInt(fd, unix.F_GETPIPE_SZ, 0) })
	if err != nil || size != outputPipeSize {
		t.Fatalf("pipe size %d (%v); want %d", size, err, outputPipeSize)
	}
}
