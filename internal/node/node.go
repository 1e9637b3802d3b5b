// Package node is the contract between the control plane and a node: what
// the control plane asks of a node (start, exec, files, sleep, wake,
// destroy) in the node's own terms, and what a node reports back.
//
// It holds types only and imports nothing of cove but the API's types, so
// the control plane depends on it without linking the runtime, the agent
// protocol or the output recorder. The node that runs in the same process
// (internal/node/local) implements it today; a remote node client for a
// fleet implements the same calls over the network.
package node

import (
	"context"
	"io"
	"time"

	"github.com/cove-dev/cove/api"
)

// ManagedTemplate is the template of the managed environment (Debian with
// bash, git, Python 3, Node.js and curl), the default one.
const ManagedTemplate = "managed"

// SandboxSpec is what a node needs to start (or wake) a sandbox.
type SandboxSpec struct {
	ID       string
	Hostname string
	// Template names the image; the node knows the images it has.
	Template  string
	Resources api.Resources
	// Pids bounds the processes and threads in the sandbox.
	Pids    int64
	Workdir string
	Network api.NetworkPolicy
	// Secrets are the values the sandbox was given that its commands'
	// recorded output must not hold (wake and reattach: the node keeps
	// them in memory only).
	Secrets []Secret
	// Inject are the secrets the network policy's injection rules name,
	// with the sandbox's placeholders for them; the node's network
	// gateway keeps them in memory only.
	Inject []InjectSecret
	// IDs is the sandbox's host uid/gid range; zero is LegacyIDRange.
	IDs IDRange
	// DiskIDs is the range the disk a Wake restores was written in, when
	// another sandbox wrote it (a cached setup); zero means IDs.
	DiskIDs IDRange
	// Devices are the node's GPUs given to it (a workload's), by their
	// CDI names from GPUs.Names.
	Devices []string
	// Save names the generation of the sandbox's save a Wake restores
	// (SaveInfo.Generation of the sleep that wrote it); "" restores the
	// only or newest complete one (a node with a store of its own).
	Save string
	// SetID lets set-uid programs (sudo) raise privileges in the
	// sandbox: no no_new_privs, no nosuid on its root filesystem
	// (api.Sandbox.SetID; E2B's sandboxes only).
	SetID bool
	// Layers are the snapshots the sandbox stands on, top first: their
	// frozen files are read-only layers under its own disk, shared by
	// every sandbox on them. The node fetches a layer it lacks from the
	// save store.
	Layers []Layer `json:",omitempty"`
	// Volumes are the team's volumes the sandbox mounts; they stay on
	// the node that holds them (VolumeRef.Node), where a fleet places
	// the sandbox.
	Volumes []VolumeMount `json:",omitempty"`
}

// VolumeRef names a volume and the node that holds its files ("" on a
// node of its own).
type VolumeRef struct {
	ID   string `json:"id"`
	Node string `json:"node,omitempty"`
}

// VolumeMount is a volume a sandbox mounts at Path (absolute, checked
// by the control plane), through the sandbox's own ID range.
type VolumeMount struct {
	VolumeRef
	Path     string `json:"path"`
	ReadOnly bool   `json:"read_only,omitempty"`
}

// VolumeInfo is what a node measures of a volume's disk.
type VolumeInfo struct {
	SizeBytes int64 `json:"size_bytes"`
	UsedBytes int64 `json:"used_bytes"`
	// Full: no inode, or too few blocks for a write to count on, are
	// left (less than 1 MiB or 1/128 of the size: ext4 answers ENOSPC
	// while it still holds a few blocks back).
	Full bool `json:"full"`
}

// Layer is a snapshot a sandbox stands on: its ID and the host ID range
// its files were written in.
type Layer struct {
	Snapshot string  `json:"snapshot"`
	IDs      IDRange `json:"ids"`
}

// GPUs are what a node advertises of its GPUs: how many of which type,
// and the names it gives them to sandboxes by (CDI device names).
type GPUs struct {
	Type  string
	Names []string
}

// Secret is a value given to a sandbox: the node replaces it with
// [secret:NAME] in every command's recorded output, before it is stored.
type Secret struct{ Name, Value string }

// InjectSecret is a secret an injection rule names: its value, and the
// placeholder the sandbox holds in its place.
type InjectSecret struct{ Name, Value, Placeholder string }

// User is an account inside every sandbox that commands and files may run
// or belong as.
type User struct {
	UID, GID int
	Home     string
}

// Users are the accounts of every template: "user" (the default) and "root".
var Users = map[string]User{
	"user": {UID: 1000, GID: 1000, Home: "/home/user"},
	"root": {UID: 0, GID: 0, Home: "/root"},
}

// TermSize is a terminal's size in characters.
type TermSize struct{ Cols, Rows int }

// ExecSpec is a command to start in a sandbox.
type ExecSpec struct {
	ID string
	// Template is the sandbox's template, whose shell runs Shell.
	Template string
	// Shell is a shell string; Argv a program and its arguments. One is set.
	Shell string
	Argv  []string
	Cwd   string
	// Env is the whole environment of the command.
	Env      map[string]string
	UID, GID int
	// Stdin keeps the command's input open for Stdin calls.
	Stdin bool
	// Timeout kills the command's process group after it; 0 never does.
	Timeout time.Duration
	// PTY runs the command on a terminal of that size.
	PTY *TermSize
	// Secrets are the secret values in Env. The node adds them to what
	// it redacts from the output of every command of the sandbox.
	Secrets []Secret
}

// MaxPID is the largest process ID Linux gives (PID_MAX_LIMIT, 2^22).
const MaxPID = 1 << 22

// Started is a command the node started.
type Started struct {
	// PID is the command's process ID in its sandbox's pid namespace, as
	// the sandbox's agent reports it (untrusted: the sandbox's own word
	// about itself, checked to be a pid Linux could give).
	PID int `json:"pid"`
}

// Exit is how a command ended.
type Exit struct {
	ExitCode int    `json:"exit_code"` // -1 when killed by a signal
	Signal   string `json:"signal"`    // "KILL", "TERM", … or ""
	TimedOut bool   `json:"timed_out"`
	// Lost is set in a recorded exit the node wrote for a command lost
	// with its sandbox's processes (a sleep, a restore), so that reading
	// it back after a restart reports the command lost, not exited.
	Lost bool `json:"lost,omitempty"`
}

// ExitFunc is told when a command ends: by its exit, or lost with its
// sandbox. A node calls it from its own goroutines.
type ExitFunc func(sandboxID, commandID string, exit Exit, lost bool)

// Chunk is one piece of recorded output, in the order it was produced.
type Chunk struct {
	Seq    int64
	Stream string // "stdout", "stderr", or "" for the truncation marker
	Data   []byte
	// Truncated marks the point where recording stopped at its cap.
	Truncated bool
}

// Output is a command's recorded output on the node, held open for its
// reader: every Output a node returns must be closed, so that the node
// keeps files open only for outputs in use.
type Output interface {
	// Close releases the reader's hold; the Output is unusable after.
	Close() error
	// Read calls fn with each chunk after the sequence number after, in
	// order; with follow it waits for more until the command ends or ctx
	// is done. It returns the exit once it is recorded.
	Read(ctx context.Context, after int64, follow bool, fn func(Chunk) error) (*Exit, error)
	// Stream returns the raw bytes of "stdout" or "stderr" and their size.
	Stream(name string) (io.ReaderAt, int64, error)
	// LastSeq is the sequence number of the last chunk recorded.
	LastSeq() int64
	// Sizes returns the bytes recorded on each stream.
	Sizes() (stdout, stderr int64)
	// Exit is the recorded exit, nil while the command runs.
	Exit() *Exit
	// Ended reports that the exit is recorded or the log was closed.
	Ended() bool
	// Changed is closed at the next append.
	Changed() <-chan struct{}
}

// SaveInfo describes a sleeping sandbox's save.
type SaveInfo struct {
	DataBytes    int64
	ArchiveBytes int64
	// Generation names this save among the sandbox's saves: a new one
	// for every save, written before its manifest. A fleet records it
	// only once the save is complete and restores exactly that one.
	Generation string
	// SHA256 is the hex sha-256 of the stored disk archive.
	SHA256 string `json:",omitempty"`
}

// ListSpec asks for a page of a directory listing.
type ListSpec struct {
	Path  string
	Depth int
	Limit int
	// After is the path the previous page ended at.
	After string
}

// ReadSpec asks for a file's content: a range and conditions, with the
// values of the HTTP request headers of the same names (RFC 9110).
type ReadSpec struct {
	Path              string
	Range             string
	IfRange           string
	IfMatch           []string
	IfNoneMatch       []string
	IfModifiedSince   string
	IfUnmodifiedSince string
}

// Content is a download: its outcome (200, 206, 304 or 416 in HTTP's
// terms), what describes it, checked by the node, and the body, which the
// caller closes.
type Content struct {
	Status        int
	ContentLength int64 // -1 when unknown
	ContentRange  string
	ContentType   string
	ETag          string
	ReprDigest    string
	LastModified  string
	Body          io.ReadCloser
}

// WriteSpec is an upload replacing a file's content atomically.
type WriteSpec struct {
	Path     string
	UID, GID int
	// Chown gives an existing file to UID/GID; a new file always gets them.
	Chown bool
	// Mode is the permission bits; -1 keeps an existing file's (0644 new).
	Mode        int
	IfMatch     []string // versions; "*" matches any existing file
	IfNoneMatch bool     // refuse when the file exists
	// SHA256 is the hex digest the bytes must have, when known before the
	// body; Trailer, when set, is called after the body and may return it.
	SHA256  string
	Trailer func() (string, error)
	Size    int64 // -1 when unknown
	// Xattrs are the user.* extended attributes the new content gets;
	// the old content's go with it (fspath.CheckXattrs bounds them).
	Xattrs map[string]string
}

// Edit replaces the one occurrence of Old by New.
type Edit struct{ Old, New string }

// EditSpec applies edits in turn to a file.
type EditSpec struct {
	Path    string
	IfMatch []string
	Edits   []Edit
}

// MkdirSpec creates a directory and its missing parents.
type MkdirSpec struct {
	Path     string
	UID, GID int
}

// MoveSpec renames a file or directory.
type MoveSpec struct {
	From, To  string
	Overwrite bool
	// UID and GID own missing parents of To.
	UID, GID int
}

// ArchiveSpec extracts a tar or tar.gz into a folder.
type ArchiveSpec struct {
	Path     string
	UID, GID int
}

// Stats are a running sandbox's counters as the node reads them at Time.
// CPU and network counters are cumulative since the sandbox (this run of
// it) started; the control plane turns them into rates by difference.
type Stats struct {
	Time time.Time
	// CPUNanos is the CPU time its processes used.
	CPUNanos uint64
	// MemoryBytes is its memory in use now (page cache included, as its
	// memory limit counts it); MemoryPeakBytes the most it used since it
	// started.
	MemoryBytes     int64
	MemoryPeakBytes int64
	// DiskBytes is what its files take on its own disk.
	DiskBytes int64
	// NetInBytes and NetOutBytes count the bytes into and out of the
	// sandbox at its network interface.
	NetInBytes  uint64
	NetOutBytes uint64
}

// GitSpec is a git source to clone into a sandbox's folder. The node
// clones it apart from the sandbox, reaching only the repository's host
// through its gateway, and hands the tree to the sandbox: the token never
// enters it.
type GitSpec struct {
	URL   string // http(s), without credentials
	Ref   string
	Depth int
	Token string // "" for none
	// IDs are host IDs held for this clone alone: git runs as the first,
	// so no other process of the host can read its environment or write
	// its files.
	IDs IDRange
	// Path is the folder the tree lands in, owned by UID and GID.
	Path     string
	UID, GID int
}
