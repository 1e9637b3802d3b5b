package remote

import (
	"context"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/node"
	"github.com/cove-dev/cove/internal/node/nodeapi"
)

type args = nodeapi.Call

// Admit asks the node whether it has room for the sandbox.
func (c *Client) Admit(ctx context.Context, spec node.SandboxSpec) error {
	return c.call(ctx, "admit", false, args{Spec: &spec}, nil)
}

// Start starts a sandbox on the node.
func (c *Client) Start(ctx context.Context, spec node.SandboxSpec) error {
	return c.call(ctx, "start", true, args{Spec: &spec}, nil)
}

// Wake starts a sandbox from its save.
func (c *Client) Wake(ctx context.Context, spec node.SandboxSpec) error {
	return c.call(ctx, "wake", true, args{Spec: &spec}, nil)
}

// Attach finds a sandbox the node ran before and resumes recording the
// given commands.
func (c *Client) Attach(ctx context.Context, spec node.SandboxSpec, running []string) error {
	return c.call(ctx, "attach", true, args{Spec: &spec, Commands: running}, nil)
}

// Destroy removes everything of a sandbox.
func (c *Client) Destroy(ctx context.Context, id string) error {
	return c.call(ctx, "destroy", true, args{Sandbox: id}, nil)
}

// DestroyRuntime removes a sandbox's runtime, keeping its save and output.
func (c *Client) DestroyRuntime(ctx context.Context, id string) error {
	return c.call(ctx, "destroy-runtime", true, args{Sandbox: id}, nil)
}

// FinishSleep stops and saves a sandbox.
func (c *Client) FinishSleep(ctx context.Context, id string) (node.SaveInfo, error) {
	var out node.SaveInfo
	err := c.call(ctx, "finish-sleep", true, args{Sandbox: id}, &out)
	return out, err
}

// DropSave removes a save.
func (c *Client) DropSave(ctx context.Context, id string) error {
	return c.call(ctx, "drop-save", true, args{Sandbox: id}, nil)
}

// CopySave copies a complete save.
func (c *Client) CopySave(ctx context.Context, from, to string) (node.SaveInfo, error) {
	var out node.SaveInfo
	err := c.call(ctx, "copy-save", true, args{From: from, To: to}, &out)
	return out, err
}

// Snapshot freezes a sandbox's files as a snapshot.
func (c *Client) Snapshot(ctx context.Context, id, snap string, asleep bool, save string) (node.SaveInfo, error) {
	var out node.SaveInfo
	err := c.call(ctx, "snapshot", true, args{Sandbox: id, Snapshot: snap, Asleep: asleep, Save: save}, &out)
	return out, err
}

// DropSnapshot removes a snapshot from the store and the node.
func (c *Client) DropSnapshot(ctx context.Context, snap string) error {
	return c.call(ctx, "drop-snapshot", true, args{Snapshot: snap}, nil)
}

// Known lists the sandboxes the node has state for.
func (c *Client) Known(ctx context.Context) ([]string, error) {
	var out []string
	err := c.call(ctx, "known", false, args{}, &out)
	return out, err
}

// Lose records commands of a sandbox as lost; a failure is logged.
func (c *Client) Lose(id string, commands []string) {
	ctx, cancel := c.quick()
	defer cancel()
	c.logged("lose", c.call(ctx, "lose", true, args{Sandbox: id, Commands: commands}, nil))
}

// SetPolicy changes a sandbox's network policy.
func (c *Client) SetPolicy(id string, p api.NetworkPolicy) error {
	ctx, cancel := c.quick()
	defer cancel()
	return c.call(ctx, "set-policy", true, args{Sandbox: id, Policy: &p}, nil)
}

// SetInjectSecrets replaces the secrets the node's gateway injects for a
// sandbox.
func (c *Client) SetInjectSecrets(id string, inject []node.InjectSecret) error {
	ctx, cancel := c.quick()
	defer cancel()
	return c.call(ctx, "set-inject-secrets", true, args{Sandbox: id, Inject: inject}, nil)
}

// UseSetupPolicy switches a sandbox to its setup policy or back; a
// failure is logged.
func (c *Client) UseSetupPolicy(id string, on bool) {
	ctx, cancel := c.quick()
	defer cancel()
	c.logged("use-setup-policy", c.call(ctx, "use-setup-policy", true, args{Sandbox: id, On: on}, nil))
}

// SetHostname changes a sandbox's host name.
func (c *Client) SetHostname(ctx context.Context, id, name string) error {
	return c.call(ctx, "set-hostname", true, args{Sandbox: id, Hostname: name}, nil)
}

// DrainObservations hands over the node's network reports since the last
// call; a node that does not answer hands none over (they wait there for
// the next call).
func (c *Client) DrainObservations() []node.Observation {
	ctx, cancel := c.quick()
	defer cancel()
	var out []node.Observation
	c.logged("drain-observations", c.call(ctx, "drain-observations", true, args{}, &out))
	return out
}

// PendingObservations are a sandbox's reports not handed over yet.
func (c *Client) PendingObservations(id string) []api.NetworkObservation {
	ctx, cancel := c.quick()
	defer cancel()
	var out []api.NetworkObservation
	c.logged("pending-observations", c.call(ctx, "pending-observations", false, args{Sandbox: id}, &out))
	return out
}

// Exec starts a command. A node that answers no pid (one from before
// pids), or one Linux could not give, leaves it 0, not known: the
// command runs all the same.
func (c *Client) Exec(ctx context.Context, sandboxID string, spec node.ExecSpec) (node.Started, error) {
	var out node.Started
	if err := c.call(ctx, "exec", true, args{Sandbox: sandboxID, Exec: &spec}, &out); err != nil {
		return node.Started{}, err
	}
	if out.PID < 0 || out.PID > node.MaxPID {
		c.cfg.Log.Warn("a node answered a pid out of range", "node", c.cfg.NodeID, "sandbox", sandboxID, "command", spec.ID, "pid", out.PID)
		return node.Started{}, nil
	}
	return out, nil
}

// Signal sends a signal to a command.
func (c *Client) Signal(ctx context.Context, sandboxID, commandID, sig string) error {
	return c.call(ctx, "signal", true, args{Sandbox: sandboxID, Command: commandID, Signal: sig}, nil)
}

// Resize changes a command's terminal size.
func (c *Client) Resize(ctx context.Context, sandboxID, commandID string, size node.TermSize) error {
	return c.call(ctx, "resize", true, args{Sandbox: sandboxID, Command: commandID, Size: &size}, nil)
}

// StatFile describes a file.
func (c *Client) StatFile(ctx context.Context, sandboxID, path string) (api.FileEntry, error) {
	var out api.FileEntry
	err := c.call(ctx, "stat-file", false, args{Sandbox: sandboxID, Path: path}, &out)
	return out, err
}

// ListFiles lists a directory.
func (c *Client) ListFiles(ctx context.Context, sandboxID string, spec node.ListSpec) (api.List[api.FileEntry], error) {
	var out api.List[api.FileEntry]
	err := c.call(ctx, "list-files", false, args{Sandbox: sandboxID, List: &spec}, &out)
	return out, err
}

// EditFile edits a file.
func (c *Client) EditFile(ctx context.Context, sandboxID string, spec node.EditSpec) (api.FileEntry, error) {
	var out api.FileEntry
	err := c.call(ctx, "edit-file", true, args{Sandbox: sandboxID, Edit: &spec}, &out)
	return out, err
}

// Mkdir makes a directory and its parents.
func (c *Client) Mkdir(ctx context.Context, sandboxID string, spec node.MkdirSpec) (api.FileEntry, error) {
	var out api.FileEntry
	err := c.call(ctx, "mkdir", true, args{Sandbox: sandboxID, Mkdir: &spec}, &out)
	return out, err
}

// MoveFile renames a file or directory.
func (c *Client) MoveFile(ctx context.Context, sandboxID string, spec node.MoveSpec) (api.FileEntry, error) {
	var out api.FileEntry
	err := c.call(ctx, "move-file", true, args{Sandbox: sandboxID, Move: &spec}, &out)
	return out, err
}

// RemoveFile removes a file or directory.
func (c *Client) RemoveFile(ctx context.Context, sandboxID, path string, recursive bool) error {
	return c.call(ctx, "remove-file", true, args{Sandbox: sandboxID, Path: path, Recursive: recursive}, nil)
}

// CloneGit clones a git source into a sandbox's folder.
func (c *Client) CloneGit(ctx context.Context, sandboxID string, spec node.GitSpec) (string, error) {
	var out nodeapi.Cloned
	err := c.call(ctx, "clone-git", true, args{Sandbox: sandboxID, Git: &spec}, &out)
	return out.Commit, err
}

// Stats reads the counters of the given sandboxes; a node that does not
// answer reads none.
func (c *Client) Stats(ctx context.Context, ids []string) map[string]node.Stats {
	out := map[string]node.Stats{}
	c.logged("stats", c.call(ctx, "stats", false, args{IDs: ids}, &out))
	return out
}

// GPUs are the node's GPUs; a node that does not answer has none.
func (c *Client) GPUs() node.GPUs {
	ctx, cancel := c.quick()
	defer cancel()
	var out node.GPUs
	c.logged("gpus", c.call(ctx, "gpus", false, args{}, &out))
	return out
}

// Publish makes ports the only ports of the sandbox the node connects to.
func (c *Client) Publish(ctx context.Context, sandboxID string, ports []int) error {
	return c.call(ctx, "publish", true, args{Sandbox: sandboxID, Ports: ports}, nil)
}

// PublishPort adds a port.
func (c *Client) PublishPort(ctx context.Context, sandboxID string, port int) error {
	return c.call(ctx, "publish-port", true, args{Sandbox: sandboxID, Port: port}, nil)
}

// UnpublishPort takes a port away.
func (c *Client) UnpublishPort(ctx context.Context, sandboxID string, port int) error {
	return c.call(ctx, "unpublish-port", true, args{Sandbox: sandboxID, Port: port}, nil)
}
