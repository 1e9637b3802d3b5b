package node

import (
	"context"
	"io"
	"net"

	"github.com/cove-dev/cove/api"
)

// Contract is every call the control plane makes of a node about its
// sandboxes. The node of the same process implements it
// (internal/node/local), and so do a fleet's client of a node on another
// host (internal/control/fleet/remote), the node API that serves it there
// (internal/node/nodeapi, which declares it with the node's other
// abilities) and the fleet's router, which sends each call to the node
// that holds the sandbox.
type Contract interface {
	// Admit refuses, with resource_exhausted, a sandbox the node has no
	// room for; Start and Wake check again.
	Admit(ctx context.Context, spec SandboxSpec) error
	// Start starts a sandbox under its network policy and returns once it
	// serves. Wake does the same from the sandbox's save.
	Start(ctx context.Context, spec SandboxSpec) error
	Wake(ctx context.Context, spec SandboxSpec) error
	// Attach finds a sandbox that ran before a restart and resumes
	// recording the given running commands.
	Attach(ctx context.Context, spec SandboxSpec, running []string) error
	// Destroy removes everything of a sandbox; DestroyRuntime keeps its
	// save and output. Both are idempotent.
	Destroy(ctx context.Context, id string) error
	DestroyRuntime(ctx context.Context, id string) error
	// FinishSleep stops a sandbox, saves its files and removes its
	// runtime, from wherever an earlier attempt stopped.
	FinishSleep(ctx context.Context, id string) (SaveInfo, error)
	DropSave(ctx context.Context, id string) error
	// CopySave copies the complete save named from as the save named to
	// (a sandbox's save into a setup cache entry, and back).
	CopySave(ctx context.Context, from, to string) (SaveInfo, error)
	// Snapshot freezes the files of sandbox id as the snapshot snap in
	// the save store: running on the node, at one moment while its
	// commands go on; asleep, from its save (generation save, "" the
	// newest). The frozen disk stays on the node as a layer for the
	// sandboxes that start on the snapshot.
	Snapshot(ctx context.Context, id, snap string, asleep bool, save string) (SaveInfo, error)
	// DropSnapshot removes a snapshot from the save store and the node.
	// It is idempotent.
	DropSnapshot(ctx context.Context, snap string) error
	// CreateVolume makes the disk of volume id, sizeMiB large, and
	// answers where it is (a fleet picks the node). It is idempotent.
	CreateVolume(ctx context.Context, id string, sizeMiB int64) (VolumeRef, error)
	// DropVolume removes a volume's disk and files; it is idempotent. A
	// volume a sandbox of the node still mounts is refused with
	// precondition_failed.
	DropVolume(ctx context.Context, v VolumeRef) error
	// VolumeUsage measures a volume's disk.
	VolumeUsage(ctx context.Context, v VolumeRef) (VolumeInfo, error)
	// Known lists the sandboxes the node has state for.
	Known(ctx context.Context) ([]string, error)
	// Lose records the given commands of a sandbox as lost.
	Lose(id string, commands []string)
	SetPolicy(id string, p api.NetworkPolicy) error
	// SetInjectSecrets replaces the secrets (values and placeholders) the
	// node's gateway injects for a running sandbox: those its rules name
	// as they are now.
	SetInjectSecrets(id string, inject []InjectSecret) error
	// UseSetupPolicy switches a sandbox to its setup policy
	// (network.setup_allow) or back to its own, for new connections.
	UseSetupPolicy(id string, on bool)
	SetHostname(ctx context.Context, id, name string) error
	// DrainObservations hands over every sandbox's network reports since
	// the last call; the server adds them to the store.
	// PendingObservations are a sandbox's reports not handed over yet.
	DrainObservations() []Observation
	PendingObservations(id string) []api.NetworkObservation

	// Exec starts a command and returns once it runs.
	Exec(ctx context.Context, sandboxID string, spec ExecSpec) (Started, error)
	Output(sandboxID, commandID string) (Output, error)
	Stdin(ctx context.Context, sandboxID, commandID string, r io.Reader, eof bool) error
	Signal(ctx context.Context, sandboxID, commandID, sig string) error
	Resize(ctx context.Context, sandboxID, commandID string, size TermSize) error

	StatFile(ctx context.Context, sandboxID, path string) (api.FileEntry, error)
	ListFiles(ctx context.Context, sandboxID string, spec ListSpec) (api.List[api.FileEntry], error)
	ReadFile(ctx context.Context, sandboxID string, spec ReadSpec) (*Content, error)
	WriteFile(ctx context.Context, sandboxID string, spec WriteSpec, body io.Reader) (entry api.FileEntry, created bool, err error)
	EditFile(ctx context.Context, sandboxID string, spec EditSpec) (api.FileEntry, error)
	Mkdir(ctx context.Context, sandboxID string, spec MkdirSpec) (api.FileEntry, error)
	MoveFile(ctx context.Context, sandboxID string, spec MoveSpec) (api.FileEntry, error)
	RemoveFile(ctx context.Context, sandboxID, path string, recursive bool) error
	ReadArchive(ctx context.Context, sandboxID, path string) (io.ReadCloser, error)
	WriteArchive(ctx context.Context, sandboxID string, spec ArchiveSpec, body io.Reader) (api.ArchiveResult, error)
	// CloneGit clones a git source into a folder of the sandbox and
	// returns the commit checked out.
	CloneGit(ctx context.Context, sandboxID string, spec GitSpec) (commit string, err error)
}

// Ports are a node's calls for previews (the control plane's previews
// declare them as PortNode): the ports of a sandbox the node may connect
// to, and a connection to one.
type Ports interface {
	Publish(ctx context.Context, sandboxID string, ports []int) error
	PublishPort(ctx context.Context, sandboxID string, port int) error
	UnpublishPort(ctx context.Context, sandboxID string, port int) error
	DialPort(ctx context.Context, sandboxID string, port int) (net.Conn, error)
}
