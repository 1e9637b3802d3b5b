// Package wire is the protocol between the host and cove-agent, the init
// process of every sandbox: its request and answer types, the frames of
// command output, the error codes and the limits both sides enforce.
//
// It is the only part of the agent that both binaries link: the host's
// client is package client (internal/agent/client), the agent's server is
// package guest (cmd/cove-agent/internal/guest). So it imports nothing but
// the standard library, and it knows nothing of cove's own error type: the
// client translates its codes, once.
//
// The transport is HTTP/1.1 over a unix socket that the host creates and
// hands to the sandbox as an inherited file descriptor (never a path inside
// the sandbox). Requests and answers are JSON, except command output, which
// is a stream of binary frames (see Frame) for throughput.
//
// Everything the agent says is untrusted on the host: the client bounds every
// read and validates every field with the checks of this package.
package wire

// Version is the protocol version; GET /v1/ping answers it.
const Version = 1

// Limits the host enforces on what the agent sends.
const (
	// MaxFrameData is the largest data payload of one output frame.
	MaxFrameData = 64 << 10
	// MaxJSON is the largest JSON answer the host reads from the agent.
	MaxJSON = 1 << 20
)

// AckBytes is how much output (in FrameCost units) a reader of a stream
// takes before it acknowledges it to the agent. The agent keeps more than
// this per command, or a reader and the agent would wait on each other.
const AckBytes = 1 << 20

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

// StreamQuery, added to POST /v1/commands (?output=1), asks the agent to
// answer with the command's output stream, as GET
// /v1/commands/{id}/output?after=0 would, instead of its status alone:
// one round trip starts a command and follows it to its exit. The status
// then comes as JSON in the StatusHeader header. An agent that does not
// know the query answers the status alone (201 and JSON), as before.
const StreamQuery = "output=1"

// StatusHeader holds a command's status (CommandStatus, JSON) when POST
// /v1/commands answers with its output stream.
const StatusHeader = "Cove-Command-Status"

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
	// Code is one of the codes below when the agent knows it, else empty
	// (internal).
	Code string `json:"code,omitempty"`
}

// Error codes of ErrorBody.Code. They are spelled as cove's API codes of the
// same meaning, but they are the protocol's own: the host's client maps each
// to cove's error type (and anything else to internal).
const (
	CodeNotFound            = "not_found"
	CodeConflict            = "conflict"
	CodeInvalidArgument     = "invalid_argument"
	CodeResourceExhausted   = "resource_exhausted"
	CodePermissionDenied    = "permission_denied"
	CodePreconditionFailed  = "precondition_failed"
	CodeUnprocessable       = "unprocessable"
	CodeInsufficientStorage = "insufficient_storage"
)

// Codes returns every code the agent may send, so that a translation can
// be tested against all of them.
func Codes() []string {
	return []string{
		CodeNotFound, CodeConflict, CodeInvalidArgument, CodeResourceExhausted,
		CodePermissionDenied, CodePreconditionFailed, CodeUnprocessable, CodeInsufficientStorage,
	}
}

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

// MaxOwnerSockets bounds the sockets of one POST /v1/sockets/owners.
const MaxOwnerSockets = 256

// Socket names a socket of the sandbox by its addresses as the sandbox sees
// them: the local address the sandbox sent from and the remote address it
// sent to ("ip:port" both; IPv4 or IPv6). An empty Remote matches any
// remote address; an unconnected UDP socket matches any too.
type Socket struct {
	Proto  string `json:"proto"` // "tcp" or "udp"
	Local  string `json:"local"`
	Remote string `json:"remote"`
}

// OwnersRequest is the body of POST /v1/sockets/owners: which commands own
// these sockets?
type OwnersRequest struct {
	Sockets []Socket `json:"sockets"`
}

// OwnersAnswer answers POST /v1/sockets/owners: Commands[i] is the ID of the
// command whose process (or a descendant of it) holds Sockets[i], or ""
// when no such process is found (the socket was closed, or its process is
// no command's).
type OwnersAnswer struct {
	Commands []string `json:"commands"`
}
