// Package agent is the protocol between the host and cove-agent, the init
// process of every sandbox: its wire types, the agent's server (which runs
// inside the sandbox) and the host's client.
//
// The transport is HTTP/1.1 over a unix socket that the host creates and
// hands to the sandbox as an inherited file descriptor (never a path inside
// the sandbox). Requests and answers are JSON, except command output, which
// is a stream of binary frames (see Frame) for throughput.
//
// Everything the agent says is untrusted on the host: the client bounds every
// read and validates every field.
package agent

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Version is the protocol version; GET /v1/ping answers it.
const Version = 1

// Limits the host enforces on what the agent sends.
const (
	// MaxFrameData is the largest data payload of one output frame.
	MaxFrameData = 64 << 10
	// MaxJSON is the largest JSON answer the host reads from the agent.
	MaxJSON = 1 << 20
)

// ListenFD is the descriptor number on which cove-agent finds its listening
// socket (the first of runc's --preserve-fds).
const ListenFD = 3

// Ping answers GET /v1/ping.
type Ping struct {
	Version int `json:"version"`
	PID     int `json:"pid"`
}

// ExecRequest is the body of POST /v1/commands.
type ExecRequest struct {
	ID   string   `json:"id"`   // chosen by the host (cmd_…); unique per sandbox
	Argv []string `json:"argv"` // argv[0] is looked up in PATH of Env
	Cwd  string   `json:"cwd"`
	Env  []string `json:"env"` // complete environment, KEY=VALUE
	UID  int      `json:"uid"`
	GID  int      `json:"gid"`
	// Stdin keeps a pipe open for POST /v1/commands/{id}/stdin; otherwise
	// stdin is /dev/null.
	Stdin bool `json:"stdin"`
	// TimeoutMS > 0 kills the process group after that long; the exit then
	// says TimedOut. The agent enforces it, so it holds while the host is away.
	TimeoutMS int64 `json:"timeout_ms"`
	PTY       *Size `json:"pty,omitempty"`
}

// Size is a terminal size.
type Size struct {
	Cols int `json:"cols"`
	Rows int `json:"rows"`
}

// CommandStatus is one entry of GET /v1/commands and the answer of
// POST /v1/commands.
type CommandStatus struct {
	ID      string `json:"id"`
	PID     int    `json:"pid"`
	Running bool   `json:"running"`
	// LastSeq is the sequence number of the last frame produced so far.
	LastSeq int64 `json:"last_seq"`
}

// SignalRequest is the body of POST /v1/commands/{id}/signal.
type SignalRequest struct {
	Signal string `json:"signal"` // "TERM", "KILL", "INT", "HUP", … (no SIG prefix)
}

// ErrorBody is the JSON of every non-2xx answer from the agent.
type ErrorBody struct {
	Error string `json:"error"`
	// Code is one of api's codes when the agent knows it ("not_found",
	// "conflict", "invalid_argument", …), else empty (internal).
	Code string `json:"code,omitempty"`
}

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

// Additions to version 1 (the endpoints above are unchanged).
//
// POST /v1/commands/{id}/ack?seq=N acknowledges every frame up to N without
// opening a stream, so a host that reads one long stream still frees the
// agent's buffer; it answers 204. GET /v1/commands/{id}/output answers 204
// (no body) when the command has ended and `after` is its last frame: there
// is nothing more to stream.

// FrameCost is what one frame counts against a command's output buffer:
// its data plus a fixed overhead, so that many tiny frames are bounded too.
// The client acknowledges in the same unit.
func FrameCost(f Frame) int { return len(f.Data) + frameOverhead }

const frameOverhead = 64

// Error codes of ErrorBody.Code that the agent uses.
const (
	CodeNotFound          = "not_found"
	CodeConflict          = "conflict"
	CodeInvalidArgument   = "invalid_argument"
	CodeResourceExhausted = "resource_exhausted"
)

// ValidID reports whether id is usable as a command ID: 1 to 64 characters
// of A-Z, a-z, 0-9, '_' and '-'.
func ValidID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}
