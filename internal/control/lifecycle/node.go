package lifecycle

import (
	"context"
	"io"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/previews"
	"github.com/cove-dev/cove/internal/node"
)

// Node is what the control plane asks of the node that runs its sandboxes,
// in the node's own terms (internal/node). The node in this process
// implements it (internal/node/local); unit tests use a fake; a fleet's
// remote node client will implement it over the network.
type Node interface {
	previews.PortNode
	// Admit refuses, with resource_exhausted, a sandbox the node has no
	// room for; Start and Wake check again.
	Admit(ctx context.Context, spec node.SandboxSpec) error
	// Start starts a sandbox under its network policy and returns once it
	// serves. Wake does the same from the sandbox's save.
	Start(ctx context.Context, spec node.SandboxSpec) error
	Wake(ctx context.Context, spec node.SandboxSpec) error
	// Attach finds a sandbox that ran before a restart and resumes
	// recording the given running commands.
	Attach(ctx context.Context, spec node.SandboxSpec, running []string) error
	// Destroy removes everything of a sandbox; DestroyRuntime keeps its
	// save and output. Both are idempotent.
	Destroy(ctx context.Context, id string) error
	DestroyRuntime(ctx context.Context, id string) error
	// FinishSleep stops a sandbox, saves its files and removes its
	// runtime, from wherever an earlier attempt stopped.
	FinishSleep(ctx context.Context, id string) (node.SaveInfo, error)
	DropSave(ctx context.Context, id string) error
	// CopySave copies the complete save named from as the save named to
	// (a sandbox's save into a setup cache entry, and back).
	CopySave(ctx context.Context, from, to string) (node.SaveInfo, error)
	// Known lists the sandboxes the node has state for.
	Known(ctx context.Context) ([]string, error)
	// Lose records the given commands of a sandbox as lost.
	Lose(id string, commands []string)
	SetPolicy(id string, p api.NetworkPolicy) error
	// UseSetupPolicy switches a sandbox to its setup policy
	// (network.setup_allow) or back to its own, for new connections.
	UseSetupPolicy(id string, on bool)
	SetHostname(ctx context.Context, id, name string) error
	// DrainObservations hands over every sandbox's network reports since
	// the last call; the server adds them to the store.
	// PendingObservations are a sandbox's reports not handed over yet.
	DrainObservations() []node.Observation
	PendingObservations(id string) []api.NetworkObservation

	Exec(ctx context.Context, sandboxID string, spec node.ExecSpec) error
	Output(sandboxID, commandID string) (node.Output, error)
	Stdin(ctx context.Context, sandboxID, commandID string, r io.Reader, eof bool) error
	Signal(ctx context.Context, sandboxID, commandID, sig string) error
	Resize(ctx context.Context, sandboxID, commandID string, size node.TermSize) error

	StatFile(ctx context.Context, sandboxID, path string) (api.FileEntry, error)
	ListFiles(ctx context.Context, sandboxID string, spec node.ListSpec) (api.List[api.FileEntry], error)
	ReadFile(ctx context.Context, sandboxID string, spec node.ReadSpec) (*node.Content, error)
	WriteFile(ctx context.Context, sandboxID string, spec node.WriteSpec, body io.Reader) (entry api.FileEntry, created bool, err error)
	EditFile(ctx context.Context, sandboxID string, spec node.EditSpec) (api.FileEntry, error)
	Mkdir(ctx context.Context, sandboxID string, spec node.MkdirSpec) (api.FileEntry, error)
	MoveFile(ctx context.Context, sandboxID string, spec node.MoveSpec) (api.FileEntry, error)
	RemoveFile(ctx context.Context, sandboxID, path string, recursive bool) error
	ReadArchive(ctx context.Context, sandboxID, path string) (io.ReadCloser, error)
	WriteArchive(ctx context.Context, sandboxID string, spec node.ArchiveSpec, body io.Reader) (api.ArchiveResult, error)
	// CloneGit clones a git source into a folder of the sandbox and
	// returns the commit checked out.
	CloneGit(ctx context.Context, sandboxID string, spec node.GitSpec) (commit string, err error)
}
