package nodeapi

import (
	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/netpolicy"
	"github.com/cove-dev/cove/internal/node"
)

// Prefix is the path every route of the node API starts with.
const Prefix = "/node/v1/"

// Headers of the node API.
const (
	// OperationHeader names a state-changing call; the node answers a
	// retry with the same ID from memory for OpTTL.
	OperationHeader = "Cove-Operation"
	// ArgsHeader carries a streaming call's arguments (base64url of
	// their JSON) when the body is the stream.
	ArgsHeader = "Cove-Args"
	// ContentHeader carries a file download's description (base64url
	// of the JSON of a node.Content without its body).
	ContentHeader = "Cove-Content"
	// DigestTrailer is an upload's SHA-256, sent after its body when
	// the writer's WriteSpec.Trailer says so.
	DigestTrailer = "Cove-Sha256"
	// EventsEpochHeader names this run of the node's event stream:
	// sequence numbers of another run mean nothing to this one.
	EventsEpochHeader = "Cove-Events-Epoch"
	// EventsLostHeader counts events dropped from the backlog before
	// the reader's resume point.
	EventsLostHeader = "Cove-Events-Lost"
	// SizeHeader is the size of an output stream, on its range reads.
	SizeHeader = "Cove-Size"
	// TunnelProtocol is the Upgrade token of a DialPort tunnel.
	TunnelProtocol = "cove-tunnel"
)

// Call holds the arguments of a JSON call; each call reads its own
// fields (see the table in calls.go, whose keys name the calls).
type Call struct {
	Sandbox   string              `json:"sandbox,omitempty"`
	Command   string              `json:"command,omitempty"`
	Spec      *node.SandboxSpec   `json:"spec,omitempty"`
	Commands  []string            `json:"commands,omitempty"`
	IDs       []string            `json:"ids,omitempty"`
	From      string              `json:"from,omitempty"`
	To        string              `json:"to,omitempty"`
	Policy    *api.NetworkPolicy  `json:"policy,omitempty"`
	Inject    []node.InjectSecret `json:"inject,omitempty"`
	On        bool                `json:"on,omitempty"`
	Hostname  string              `json:"hostname,omitempty"`
	Signal    string              `json:"signal,omitempty"`
	Path      string              `json:"path,omitempty"`
	Recursive bool                `json:"recursive,omitempty"`
	Port      int                 `json:"port,omitempty"`
	Ports     []int               `json:"ports,omitempty"`
	Exec      *node.ExecSpec      `json:"exec,omitempty"`
	Size      *node.TermSize      `json:"size,omitempty"`
	List      *node.ListSpec      `json:"list,omitempty"`
	Read      *node.ReadSpec      `json:"read,omitempty"`
	Edit      *node.EditSpec      `json:"edit,omitempty"`
	Mkdir     *node.MkdirSpec     `json:"mkdir,omitempty"`
	Move      *node.MoveSpec      `json:"move,omitempty"`
	Archive   *node.ArchiveSpec   `json:"archive,omitempty"`
	Git       *node.GitSpec       `json:"git,omitempty"`
	Write     *WriteArgs          `json:"write,omitempty"`
	// Snapshot, Asleep and Save are a snapshot call's.
	Snapshot string `json:"snapshot,omitempty"`
	Asleep   bool   `json:"asleep,omitempty"`
	Save     string `json:"save,omitempty"`
	// Volume and SizeMiB are the volume calls'.
	Volume  *node.VolumeRef `json:"volume,omitempty"`
	SizeMiB int64           `json:"size_mib,omitempty"`
}

// WriteArgs is node.WriteSpec on the wire: Trailer says the digest
// follows the body as the DigestTrailer trailer.
type WriteArgs struct {
	Path        string   `json:"path"`
	UID         int      `json:"uid"`
	GID         int      `json:"gid"`
	Chown       bool     `json:"chown,omitempty"`
	Mode        int      `json:"mode"`
	IfMatch     []string `json:"if_match,omitempty"`
	IfNoneMatch bool     `json:"if_none_match,omitempty"`
	SHA256      string   `json:"sha256,omitempty"`
	Trailer     bool     `json:"trailer,omitempty"`
	Size        int64    `json:"size"`
	// Xattrs are node.WriteSpec's.
	Xattrs map[string]string `json:"xattrs,omitempty"`
}

// Written is WriteFile's answer.
type Written struct {
	Entry   api.FileEntry `json:"entry"`
	Created bool          `json:"created"`
}

// Cloned is CloneGit's answer.
type Cloned struct {
	Commit string `json:"commit"`
}

// Content is node.Content without its body, in ContentHeader.
type Content struct {
	Status        int    `json:"status"`
	ContentLength int64  `json:"content_length"`
	ContentRange  string `json:"content_range,omitempty"`
	ContentType   string `json:"content_type,omitempty"`
	ETag          string `json:"etag,omitempty"`
	ReprDigest    string `json:"repr_digest,omitempty"`
	LastModified  string `json:"last_modified,omitempty"`
}

// OutputState is a line of an output's watch stream: what the node has
// recorded of the command so far.
type OutputState struct {
	LastSeq int64      `json:"last_seq"`
	Stdout  int64      `json:"stdout"`
	Stderr  int64      `json:"stderr"`
	Exit    *node.Exit `json:"exit,omitempty"`
	Ended   bool       `json:"ended,omitempty"`
}

// OutputLine is a line of an output read: a chunk, or the last line with
// the exit (when recorded) or the error the read ended with.
type OutputLine struct {
	Chunk *node.Chunk `json:"chunk,omitempty"`
	Done  bool        `json:"done,omitempty"`
	Exit  *node.Exit  `json:"exit,omitempty"`
	Error *api.Error  `json:"error,omitempty"`
}

// Event kinds.
const (
	EventExit     = "exit"
	EventDenied   = "denied"
	EventInjected = "injected"
)

// Event is a line of the events stream.
type Event struct {
	Seq         int64                   `json:"seq"`
	Kind        string                  `json:"kind"`
	Sandbox     string                  `json:"sandbox"`
	Command     string                  `json:"command,omitempty"`
	Exit        *node.Exit              `json:"exit,omitempty"`
	Lost        bool                    `json:"lost,omitempty"`
	Observation *api.NetworkObservation `json:"observation,omitempty"`
	Suppressed  int64                   `json:"suppressed,omitempty"`
	// Injected is what the gateway reports of a request it terminated for
	// an injection rule (never a value).
	Injected *netpolicy.InjectEvent `json:"injected,omitempty"`
}
