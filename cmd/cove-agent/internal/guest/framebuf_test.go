package guest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cove-dev/cove/internal/agent/client"
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

// TestOnlyFastWritersGetLargePipes: the output pipe of a command that
// prints little keeps the kernel's default size; that of a command whose
// output fills a whole frame grows to outputPipeSize (a pipe's pages
// count against its creator's budget of them).
func TestOnlyFastWritersGetLargePipes(t *testing.T) {
	_, c := startServer(t, ServerConfig{})
	pipeSize := func(pid int) int {
		f, err := os.Open(fmt.Sprintf("/proc/%d/fd/1", pid))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		size, err := unix.FcntlInt(f.Fd(), unix.F_GETPIPE_SZ, 0)
		if err != nil {
			t.Fatal(err)
		}
		return size
	}
	quiet, err := c.Exec(t.Context(), wire.ExecRequest{ID: "quiet", Argv: []string{"sh", "-c", "echo hi; exec sleep 1000"}, Env: []string{testPath}})
	if err != nil {
		t.Fatal(err)
	}
	loud, err := c.Exec(t.Context(), wire.ExecRequest{ID: "loud", Argv: []string{"sh", "-c", "head -c 4000000 /dev/zero; exec sleep 1000"}, Env: []string{testPath}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Signal(context.Background(), "quiet", "KILL")
	defer c.Signal(context.Background(), "loud", "KILL")
	// The loud one's output all read: its reads filled frames.
	collectUntil(t, c, "loud", 4000000)
	collectUntil(t, c, "quiet", 3)
	if got := pipeSize(loud.PID); got != outputPipeSize {
		t.Errorf("pipe of a command that wrote 4 MB: %d bytes, want %d", got, outputPipeSize)
	}
	if got := pipeSize(quiet.PID); got == outputPipeSize {
		t.Errorf("pipe of a command that wrote 3 bytes: %d bytes, want the kernel's default", got)
	}
}

// collectUntil reads id's output until n bytes of its stdout have come.
func collectUntil(t *testing.T, c *client.Client, id string, n int) {
	t.Helper()
	s, err := c.Output(t.Context(), id, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for got := 0; got < n; {
		f, err := s.Next()
		if err != nil {
			t.Fatalf("output of %s after %d bytes: %v", id, got, err)
		}
		if f.Kind == wire.FrameStdout {
			got += len(f.Data)
		}
	}
}
