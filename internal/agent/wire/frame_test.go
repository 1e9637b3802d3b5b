package wire

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

func frames(fs ...Frame) []byte {
	var b bytes.Buffer
	for _, f := range fs {
		WriteFrame(&b, f)
	}
	return b.Bytes()
}

func FuzzReadFrame(f *testing.F) {
	f.Add(frames(Frame{FrameStdout, 1, []byte("hello")}))
	f.Add(frames(Frame{FrameExit, 7, []byte(`{"exit_code":-1,"signal":"KILL"}`)}))
	f.Add(frames(Frame{FrameStderr, 2, nil}, Frame{FrameDropped, 3, make([]byte, 8)}))
	f.Add([]byte{1, 0, 0, 0})
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0})
	f.Add([]byte{2, 0, 0, 0, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, in []byte) {
		r := bytes.NewReader(in)
		buf := make([]byte, 16)
		for {
			start := len(in) - r.Len()
			fr, err := ReadFrame(r, buf)
			if err != nil {
				if err != io.EOF && !errors.Is(err, ErrBadFrame) {
					t.Fatalf("error %v is neither EOF nor ErrBadFrame", err)
				}
				if err == io.EOF && start != len(in) {
					t.Fatalf("EOF with %d bytes left", len(in)-start)
				}
				return
			}
			if fr.Kind < FrameStdout || fr.Kind > FrameDropped || fr.Seq <= 0 || len(fr.Data) > MaxFrameData {
				t.Fatalf("accepted bad frame %d/%d/%d", fr.Kind, fr.Seq, len(fr.Data))
			}
			// What was read is exactly its wire form.
			consumed := in[start : len(in)-r.Len()]
			// (ReadFrame ignores the 3 reserved bytes.)
			if got := frames(fr); got[0] != consumed[0] || !bytes.Equal(got[4:], consumed[4:]) {
				t.Fatalf("frame %+v does not match its %d bytes", fr, len(consumed))
			}
		}
	})
}
