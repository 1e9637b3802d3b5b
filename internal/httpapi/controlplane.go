package httpapi

import (
	"context"
	"io"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/assets"
	"github.com/cove-dev/cove/internal/control/commands"
	"github.com/cove-dev/cove/internal/control/events"
	"github.com/cove-dev/cove/internal/control/files"
	"github.com/cove-dev/cove/internal/control/lifecycle"
	"github.com/cove-dev/cove/internal/control/workloads"
	"github.com/cove-dev/cove/internal/node"
)

// Sandboxes are the sandbox life cycle's calls (sandboxes.go) and the
// warm pool's health.
type Sandboxes interface {
	CreateSandbox(ctx context.Context, teamID string, req api.CreateSandboxRequest) (api.Sandbox, error)
	GetSandbox(ctx context.Context, teamID, ref string) (api.Sandbox, error)
	WaitSandbox(ctx context.Context, teamID, ref string, want api.SandboxState, timeout time.Duration) (api.Sandbox, error)
	ListSandboxes(ctx context.Context, teamID string, q lifecycle.SandboxQuery) (api.List[api.Sandbox], error)
	UpdateSandbox(ctx context.Context, teamID, ref string, req api.UpdateSandboxRequest) (api.Sandbox, error)
	TerminateSandbox(ctx context.Context, teamID, ref string) (api.Sandbox, error)
	SleepSandbox(ctx context.Context, teamID, ref, reason string) (api.Sandbox, error)
	WakeSandbox(ctx context.Context, teamID, ref string) (api.Sandbox, error)
	WarmPool() (ready, target int)
}

// Commands are a sandbox's commands' calls (commands.go, attach.go):
// internal/control/commands.
type Commands interface {
	Exec(ctx context.Context, teamID, ref string, wake bool, req api.CreateCommandRequest) (api.Command, error)
	GetCommand(ctx context.Context, teamID, ref, commandID string) (api.Command, error)
	ListCommands(ctx context.Context, teamID, ref string, q commands.Query) (api.List[api.Command], error)
	WaitCommand(ctx context.Context, teamID, ref, commandID string) (api.CommandResult, error)
	CommandOutput(ctx context.Context, teamID, ref, commandID string) (api.Command, node.Output, error)
	Stdin(ctx context.Context, teamID, ref, commandID string, r io.Reader, eof bool) error
	Signal(ctx context.Context, teamID, ref, commandID, sig string) error
	Resize(ctx context.Context, teamID, ref, commandID string, cols, rows int) error
}

// Events are the teams' event logs (events.go): internal/control/events.
type Events interface {
	ListEvents(ctx context.Context, teamID string, q events.Query) (api.List[api.Event], error)
	// Changes is closed at the next change of any sandbox, command or event.
	Changes() <-chan struct{}
}

var (
	_ Sandboxes = (*lifecycle.Core)(nil)
	_ Commands  = (*commands.Service)(nil)
	_ Events    = (*events.Log)(nil)
	_ Workloads = (*workloads.Service)(nil)
	_ GPUPlane  = (*workloads.Service)(nil)
)

// Files are a sandbox's file calls and archives (internal/control/files).
type Files interface {
	StatFile(ctx context.Context, t files.Target, p string) (api.FileEntry, error)
	ListFiles(ctx context.Context, t files.Target, q files.ListQuery) (api.List[api.FileEntry], error)
	ReadFile(ctx context.Context, t files.Target, req node.ReadSpec) (*node.Content, error)
	WriteFile(ctx context.Context, t files.Target, req files.WriteRequest, body io.Reader) (api.FileEntry, bool, error)
	EditFile(ctx context.Context, t files.Target, p string, ifMatch []string, req api.EditFileRequest) (api.FileEntry, error)
	Mkdir(ctx context.Context, t files.Target, req api.MkdirRequest, user string) (api.FileEntry, error)
	MoveFile(ctx context.Context, t files.Target, req api.MoveRequest, user string) (api.FileEntry, error)
	RemoveFile(ctx context.Context, t files.Target, p string, recursive bool) error
	ReadArchive(ctx context.Context, t files.Target, p string) (io.ReadCloser, error)
	WriteArchive(ctx context.Context, t files.Target, req files.ArchiveUpload, body io.Reader) (api.ArchiveResult, error)
	WatchFiles(ctx context.Context, t files.Target, q files.WatchQuery) (node.FileWatch, error)
}

var _ Files = (*files.Service)(nil)

// Assets are the team's assets (internal/control/assets).
type Assets interface {
	CreateAsset(ctx context.Context, teamID string, req assets.Upload, body io.Reader) (api.Asset, bool, error)
	GetAsset(ctx context.Context, teamID, assetID string) (api.Asset, error)
	ListAssets(ctx context.Context, teamID string, cursor string, limit int) (api.List[api.Asset], error)
	OpenAsset(ctx context.Context, teamID, assetID string) (api.Asset, io.ReadCloser, error)
	DeleteAsset(ctx context.Context, teamID, assetID string) error
	SaveAsset(ctx context.Context, teamID, ref string, req api.SaveAssetRequest) (api.Asset, bool, error)
}

var _ Assets = (*assets.Service)(nil)

// Workloads are the batch runs' calls (workloads.go;
// internal/control/workloads).
type Workloads interface {
	SubmitWorkload(ctx context.Context, teamID string, req api.CreateWorkloadRequest) (api.Workload, error)
	GetWorkload(ctx context.Context, teamID, id string) (api.Workload, error)
	WaitWorkload(ctx context.Context, teamID, id string, want api.WorkloadState, timeout time.Duration) (api.Workload, error)
	ListWorkloads(ctx context.Context, teamID string, q workloads.Query) (api.List[api.Workload], error)
	CancelWorkload(ctx context.Context, teamID, id string) (api.Workload, error)
	WorkloadOutput(ctx context.Context, teamID, id string) (api.Workload, node.Output, error)
}
