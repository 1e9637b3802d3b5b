package wire

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Frame kinds.
const (
	FrameStdout byte = 1
	FrameStderr byte = 2
	FrameExit   byte = 3
	// FrameDropped says output was dropped (the agent's buffer was full for
	// too long); Data holds the number of bytes dropped as 8 bytes big-endian.
	// The agent applies back-pressure first, so this is rare.
	FrameDropped byte = 4
)

// Frame is one record of GET /v1/commands/{id}/output?after=SEQ, which
// streams every frame with Seq > after in order and ends after the exit
// frame. Frames up to `after` are acknowledged: the agent may forget them.
//
// Wire form: kind (1 byte), 3 zero bytes, seq (8 bytes BE), length (4 bytes
// BE), then length bytes of data. An exit frame's data is ExitData as JSON.
//
// Additions to version 1 (the endpoints above are unchanged): POST
// /v1/commands/{id}/ack?seq=N acknowledges every frame up to N without
// opening a stream, so a host that reads one long stream still frees the
// agent's buffer; it answers 204. GET /v1/commands/{id}/output answers 204
// (no body) when the command has ended and `after` is its last frame: there
// is nothing more to stream.
type Frame struct {
	Kind byte
	Seq  int64
	Data []byte
}

// ExitData is the payload of an exit frame.
type ExitData struct {
	ExitCode int    `json:"exit_code"` // -1 when killed by a signal
	Signal   string `json:"signal"`    // "KILL", "TERM", … or ""
	TimedOut bool   `json:"timed_out"`
}

const frameHeader = 16

// WriteFrame writes f to w in wire form.
func WriteFrame(w io.Writer, f Frame) error {
	var h [frameHeader]byte
	h[0] = f.Kind
	binary.BigEndian.PutUint64(h[4:12], uint64(f.Seq))
	binary.BigEndian.PutUint32(h[12:16], uint32(len(f.Data)))
	if _, err := w.Write(h[:]); err != nil {
		return err
	}
	_, err := w.Write(f.Data)
	return err
}

// ErrBadFrame marks a frame that breaks the protocol.
var ErrBadFrame = errors.New("bad frame from agent")

// ReadFrame reads one frame from r into buf's storage when it is big enough.
// It refuses unknown kinds and payloads over MaxFrameData (the agent is
// untrusted). At a clean end of stream it returns io.EOF.
func ReadFrame(r io.Reader, buf []byte) (Frame, error) {
	var h [frameHeader]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return Frame{}, fmt.Errorf("%w: truncated header", ErrBadFrame)
		}
		return Frame{}, err
	}
	f := Frame{Kind: h[0], Seq: int64(binary.BigEndian.Uint64(h[4:12]))}
	if f.Kind < FrameStdout || f.Kind > FrameDropped {
		return Frame{}, fmt.Errorf("%w: kind %d", ErrBadFrame, f.Kind)
	}
	n := binary.BigEndian.Uint32(h[12:16])
	if n > MaxFrameData {
		return Frame{}, fmt.Errorf("%w: %d bytes of data", ErrBadFrame, n)
	}
	if f.Seq <= 0 {
		return Frame{}, fmt.Errorf("%w: seq %d", ErrBadFrame, f.Seq)
	}
	if cap(buf) >= int(n) {
		f.Data = buf[:n]
	} else {
		f.Data = make([]byte, n)
	}
	if _, err := io.ReadFull(r, f.Data); err != nil {
		return Frame{}, fmt.Errorf("%w: truncated data: %v", ErrBadFrame, err)
	}
	return f, nil
}

// FrameCost is what one frame counts against a command's output buffer:
// its data plus a fixed overhead, so that many tiny frames are bounded too.
// The client acknowledges in the same unit.
func FrameCost(f Frame) int { return len(f.Data) + frameOverhead }

const frameOverhead = 64

// ParseExit decodes and validates the data of an exit frame.
func ParseExit(data []byte) (ExitData, error) {
	var e ExitData
	if err := json.Unmarshal(data, &e); err != nil {
		return ExitData{}, fmt.Errorf("%w: exit data: %v", ErrBadFrame, err)
	}
	if e.ExitCode < -1 || e.ExitCode > 255 {
		return ExitData{}, fmt.Errorf("%w: exit code %d", ErrBadFrame, e.ExitCode)
	}
	if !validSignalName(e.Signal) {
		return ExitData{}, fmt.Errorf("%w: signal %s", ErrBadFrame, strconv.Quote(e.Signal))
	}
	return e, nil
}

// validSignalName accepts "" and short names of upper-case letters and
// digits ("KILL", "RTMIN+3" is refused; the agent reports numbers as "63").
func validSignalName(s string) bool {
	if len(s) > 16 {
		return false
	}
	return strings.IndexFunc(s, func(r rune) bool {
		return (r < 'A' || r > 'Z') && (r < '0' || r > '9')
	}) < 0
}
