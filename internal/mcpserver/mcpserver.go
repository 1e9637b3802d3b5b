// Package mcpserver offers cove's sandboxes to any Model Context Protocol
// client as tools: create a sandbox, run commands and resume their output,
// read and write files by version, see and widen the network policy, sleep,
// wake and terminate. It speaks to a cove server through the Go SDK with
// the caller's own key, so a tool can do exactly what that key can.
package mcpserver

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/cove-dev/cove/api"
	cove "github.com/cove-dev/cove/sdk/go"
)

// Limits on what one tool call returns, so that a model's context is not
// flooded: more output is read with command_output, bigger files in parts.
const (
	maxOutputBytes = 64 << 10
	maxFileBytes   = 1 << 20
	defaultWait    = 30 * time.Second
	maxWait        = 5 * time.Minute
)

// New returns an MCP server whose tools act through cl.
func New(cl *cove.Client, version string) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "cove", Title: "cove sandboxes", Version: version}, &mcp.ServerOptions{
		Instructions: instructions,
	})
	t := &tools{cl: cl}
	t.register(s)
	s.AddResourceTemplate(&mcp.ResourceTemplate{
		Name:        "sandbox-file",
		Title:       "A file in a cove sandbox",
		Description: "The content of a file inside a sandbox: cove://sandboxes/{sandbox}/files/{path}, the path without its leading slash.",
		URITemplate: "cove://sandboxes/{sandbox}/files/{+path}",
	}, t.readResource)
	return s
}

const instructions = `cove gives you Linux sandboxes of your own. Create one with create_sandbox, then run shell commands with run_command and read or change files with read_file, write_file and edit_file. Commands keep running after run_command returns: read the rest of their output with command_output from the next_seq it gave. Files carry versions: pass the version you read as expected_version when writing, so that you never overwrite a change you did not see. Outbound network is limited to the sandbox's policy; sandbox_network shows what was denied and can allow a host. Terminate sandboxes you no longer need.`

type tools struct {
	cl *cove.Client
}

func (t *tools) register(s *mcp.Server) {
	mcp.AddTool(s, &mcp.Tool{
		Name:        "create_sandbox",
		Description: "Create a Linux sandbox and wait until it runs. Returns its id, which every other tool takes as `sandbox` (a name works too). network_allow lists the hosts it may reach (host, *.suffix, host:port or CIDR); everything else is denied and observed. volumes mounts volumes of the team (create_volume) at absolute paths.",
	}, t.createSandbox)
	mcp.AddTool(s, &mcp.Tool{
		Name:        "list_sandboxes",
		Description: "List this team's sandboxes, newest first, with their state.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
	}, t.listSandboxes)
	mcp.AddTool(s, &mcp.Tool{
		Name:        "run_command",
		Description: "Run a shell command (bash -c) in a sandbox. Waits up to wait_s seconds (default 30, at most 300): if the command ends by then you get its exit code and output; if not, done is false and you get command_id and the output so far. Read the rest with command_output from next_seq. Output beyond 64 KiB per call is left for command_output too. Set stdin to true to send input later with send_input.",
	}, t.runCommand)
	mcp.AddTool(s, &mcp.Tool{
		Name:        "command_output",
		Description: "Read a command's recorded output after after_seq (use the next_seq of the previous call; 0 reads from the start), waiting up to wait_s seconds (default 30) for more while it runs. Output is kept after the command ends, so nothing is lost between calls.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
	}, t.commandOutput)
	mcp.AddTool(s, &mcp.Tool{
		Name:        "send_input",
		Description: "Write text to the stdin of a running command started with stdin: true; close ends its input (EOF).",
	}, t.sendInput)
	mcp.AddTool(s, &mcp.Tool{
		Name:        "read_file",
		Description: "Read a file of a sandbox (up to 1 MiB). Returns its content and version; pass that version as expected_version to write_file or edit_file. Binary content comes back in base64 with encoding \"base64\".",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
	}, t.readFile)
	mcp.AddTool(s, &mcp.Tool{
		Name:        "write_file",
		Description: "Write a whole file in a sandbox (parents are made). With expected_version the write happens only if the file is still at that version, else it fails and nothing changes: read it again and retry. expected_version \"none\" writes only if the file does not exist.",
	}, t.writeFile)
	mcp.AddTool(s, &mcp.Tool{
		Name:        "edit_file",
		Description: "Replace text in a file of a sandbox: each edit's old text must occur exactly once in the file, else nothing is written and the error says which edit failed. Returns the new version.",
	}, t.editFile)
	mcp.AddTool(s, &mcp.Tool{
		Name:        "list_files",
		Description: "List a directory of a sandbox, with each entry's type, size, mode and version. depth 2 or more lists subdirectories too.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
	}, t.listFiles)
	mcp.AddTool(s, &mcp.Tool{
		Name:        "sandbox_network",
		Description: "Show a sandbox's network policy and what it tried to reach: denied destinations say why a download or API call failed. allow adds destinations to the policy at once (host, *.suffix, host:port or CIDR).",
	}, t.sandboxNetwork)
	mcp.AddTool(s, &mcp.Tool{
		Name:        "sleep_sandbox",
		Description: "Put a sandbox to sleep: its processes stop, its files are kept, and it costs only storage. wake_sandbox (or any command) brings it back.",
	}, t.sleepSandbox)
	mcp.AddTool(s, &mcp.Tool{
		Name:        "wake_sandbox",
		Description: "Wake a sleeping sandbox and wait until it runs, with its files as they were.",
	}, t.wakeSandbox)
	mcp.AddTool(s, &mcp.Tool{
		Name:        "snapshot_sandbox",
		Description: "Freeze a sandbox's files (running or asleep) into a named snapshot of the team; its commands go on. create_sandbox with source {type: snapshot, snapshot_id} starts new sandboxes on it.",
	}, t.snapshotSandbox)
	mcp.AddTool(s, &mcp.Tool{
		Name:        "fork_sandbox",
		Description: "Make count new sandboxes (up to the server's limit, 100 by default) from a sandbox's files as they are now, and wait until they run. Each is independent: its own ID, disk, network and output; writes in one never show in another. Use it to try several approaches from one prepared state.",
	}, t.forkSandbox)
	mcp.AddTool(s, &mcp.Tool{
		Name:        "terminate_sandbox",
		Description: "Terminate a sandbox for good: its processes and files are gone; its recorded output and events stay readable for a while.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true)},
	}, t.terminateSandbox)
	t.registerVolumes(s)
}

func ptr[T any](v T) *T { return &v }

// toolError turns an API error into the message a model reads ("code:
// message", without details); tool errors come back as results with
// isError set, not as protocol errors. It stays an *api.Error, so callers
// can still tell its code (a missing file is a missing resource).
func toolError(err error) error {
	var ae *api.Error
	if errors.As(err, &ae) {
		return &api.Error{Code: ae.Code, Message: ae.Message}
	}
	return err
}

// Sandbox is what the tools say of a sandbox.
type Sandbox struct {
	ID          string            `json:"id"`
	Name        string            `json:"name"`
	State       string            `json:"state"`
	StateReason string            `json:"state_reason,omitempty"`
	Template    string            `json:"template"`
	Workdir     string            `json:"workdir"`
	CPUs        float64           `json:"cpus"`
	MemoryMiB   int64             `json:"memory_mib"`
	DiskMiB     int64             `json:"disk_mib"`
	Labels      map[string]string `json:"labels,omitempty"`
	Volumes     []VolumeMount     `json:"volumes,omitempty"`
}

func sandboxOf(sb api.Sandbox) Sandbox {
	return Sandbox{
		ID: sb.ID, Name: sb.Name, State: string(sb.State), StateReason: sb.StateReason,
		Template: sb.Template, Workdir: sb.Workdir, Labels: sb.Labels, Volumes: mountsOf(sb.Volumes),
		CPUs: sb.Resources.CPUs, MemoryMiB: sb.Resources.MemoryMiB, DiskMiB: sb.Resources.DiskMiB,
	}
}

type CreateSandboxInput struct {
	Name         string            `json:"name,omitempty" jsonschema:"a name unique among the team's live sandboxes"`
	Template     string            `json:"template,omitempty" jsonschema:"the template; the server's default if empty"`
	CPUs         float64           `json:"cpus,omitempty"`
	MemoryMiB    int64             `json:"memory_mib,omitempty"`
	DiskMiB      int64             `json:"disk_mib,omitempty"`
	Env          map[string]string `json:"env,omitempty" jsonschema:"environment of every command; use the team's stored secrets for credentials"`
	Workdir      string            `json:"workdir,omitempty"`
	NetworkAllow []string          `json:"network_allow,omitempty" jsonschema:"destinations the sandbox may reach"`
	IdleTimeoutS int64             `json:"idle_timeout_s,omitempty" jsonschema:"sleep after this many seconds without activity"`
	Labels       map[string]string `json:"labels,omitempty"`
	Volumes      []VolumeMountIn   `json:"volumes,omitempty" jsonschema:"volumes of the team to mount (create_volume)"`
}

func (t *tools) createSandbox(ctx context.Context, _ *mcp.CallToolRequest, in CreateSandboxInput) (*mcp.CallToolResult, Sandbox, error) {
	req := api.CreateSandboxRequest{
		Name: in.Name, Template: in.Template, Env: in.Env, Workdir: in.Workdir, Labels: in.Labels,
		Volumes: mountsIn(in.Volumes),
	}
	if in.CPUs != 0 || in.MemoryMiB != 0 || in.DiskMiB != 0 {
		req.Resources = &api.ResourcesRequest{}
		if in.CPUs != 0 {
			req.Resources.CPUs = &in.CPUs
		}
		if in.MemoryMiB != 0 {
			req.Resources.MemoryMiB = &in.MemoryMiB
		}
		if in.DiskMiB != 0 {
			req.Resources.DiskMiB = &in.DiskMiB
		}
	}
	if in.NetworkAllow != nil {
		req.Network = &api.NetworkPolicy{Allow: in.NetworkAllow}
	}
	if in.IdleTimeoutS != 0 {
		req.IdleTimeoutS = &in.IdleTimeoutS
	}
	sb, err := t.cl.CreateSandbox(ctx, req, true)
	if err != nil {
		return nil, Sandbox{}, toolError(err)
	}
	return nil, sandboxOf(sb), nil
}

type ListSandboxesInput struct {
	State string `json:"state,omitempty" jsonschema:"only sandboxes in this state (running, asleep, terminated, …)"`
	Limit int    `json:"limit,omitempty" jsonschema:"at most this many (default 50)"`
}

type ListSandboxesOutput struct {
	Sandboxes []Sandbox `json:"sandboxes"`
	More      bool      `json:"more"`
}

func (t *tools) listSandboxes(ctx context.Context, _ *mcp.CallToolRequest, in ListSandboxesInput) (*mcp.CallToolResult, ListSandboxesOutput, error) {
	limit := in.Limit
	if limit <= 0 {
		limit = 50
	}
	q := cove.SandboxQuery{Limit: limit}
	if in.State != "" {
		q.States = []api.SandboxState{api.SandboxState(in.State)}
	}
	page, err := t.cl.ListSandboxes(ctx, q)
	if err != nil {
		return nil, ListSandboxesOutput{}, toolError(err)
	}
	out := ListSandboxesOutput{Sandboxes: []Sandbox{}, More: page.NextCursor != ""}
	for _, sb := range page.Items {
		out.Sandboxes = append(out.Sandboxes, sandboxOf(sb))
	}
	return nil, out, nil
}

type RunCommandInput struct {
	Sandbox  string            `json:"sandbox" jsonschema:"the sandbox's id or name"`
	Command  string            `json:"command" jsonschema:"a shell command line, run with bash -c"`
	Cwd      string            `json:"cwd,omitempty" jsonschema:"working directory; the sandbox's workdir if empty"`
	Env      map[string]string `json:"env,omitempty"`
	TimeoutS int64             `json:"timeout_s,omitempty" jsonschema:"kill the command after this many seconds"`
	WaitS    int               `json:"wait_s,omitempty" jsonschema:"seconds to wait for the command before returning with done false (default 30, at most 300)"`
	Stdin    bool              `json:"stdin,omitempty" jsonschema:"keep stdin open for send_input"`
	User     string            `json:"user,omitempty" jsonschema:"run as this user (user or root); the sandbox's default user if empty"`
}

// CommandOutput is what run_command and command_output return.
type CommandOutput struct {
	CommandID string `json:"command_id"`
	// Done says the command has ended and every byte of its output is here
	// or was returned before.
	Done     bool   `json:"done"`
	ExitCode *int   `json:"exit_code,omitempty"`
	Signal   string `json:"signal,omitempty"`
	TimedOut bool   `json:"timed_out,omitempty"`
	Stdout   string `json:"stdout"`
	Stderr   string `json:"stderr"`
	// NextSeq is the after_seq of the next command_output call.
	NextSeq int64 `json:"next_seq"`
	// More says there is output beyond this call's 64 KiB.
	More bool `json:"more,omitempty"`
}

func (t *tools) runCommand(ctx context.Context, _ *mcp.CallToolRequest, in RunCommandInput) (*mcp.CallToolResult, CommandOutput, error) {
	if strings.TrimSpace(in.Command) == "" {
		return nil, CommandOutput{}, errors.New("command is empty")
	}
	req := api.CreateCommandRequest{Command: in.Command, Cwd: in.Cwd, Env: in.Env, Stdin: in.Stdin, User: in.User}
	if in.TimeoutS > 0 {
		req.TimeoutS = &in.TimeoutS
	}
	c, err := t.cl.Exec(ctx, in.Sandbox, req)
	if err != nil {
		return nil, CommandOutput{}, toolError(err)
	}
	out, err := t.collect(ctx, in.Sandbox, c.ID, 0, waitOf(in.WaitS))
	return nil, out, err
}

type CommandOutputInput struct {
	Sandbox   string `json:"sandbox" jsonschema:"the sandbox's id or name"`
	CommandID string `json:"command_id"`
	AfterSeq  int64  `json:"after_seq,omitempty" jsonschema:"the next_seq of the previous call; 0 reads from the start"`
	WaitS     int    `json:"wait_s,omitempty" jsonschema:"seconds to wait for more output while the command runs (default 30, at most 300)"`
}

func (t *tools) commandOutput(ctx context.Context, _ *mcp.CallToolRequest, in CommandOutputInput) (*mcp.CallToolResult, CommandOutput, error) {
	if in.AfterSeq < 0 {
		return nil, CommandOutput{}, errors.New("after_seq must not be negative")
	}
	out, err := t.collect(ctx, in.Sandbox, in.CommandID, in.AfterSeq, waitOf(in.WaitS))
	return nil, out, err
}

func waitOf(s int) time.Duration {
	switch {
	case s <= 0:
		return defaultWait
	case time.Duration(s)*time.Second > maxWait:
		return maxWait
	}
	return time.Duration(s) * time.Second
}

// errFull stops reading output once a call has its share.
var errFull = errors.New("enough output for one call")

// collect follows a command's output after seq after for up to wait, and
// returns what came, at most maxOutputBytes of it.
func (t *tools) collect(ctx context.Context, ref, id string, after int64, wait time.Duration) (CommandOutput, error) {
	out := CommandOutput{CommandID: id, NextSeq: after}
	var stdout, stderr strings.Builder
	fctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	err := t.cl.Output(fctx, ref, id, after, true, func(r api.OutputRecord) error {
		if r.Type == "exit" {
			out.Done, out.ExitCode, out.Signal, out.TimedOut = true, r.ExitCode, r.Signal, r.TimedOut
			out.NextSeq = r.Seq
			return nil
		}
		if stdout.Len()+stderr.Len()+len(r.Data) > maxOutputBytes && stdout.Len()+stderr.Len() > 0 {
			out.More = true
			return errFull
		}
		if r.Stream == "stderr" {
			stderr.Write(r.Data)
		} else {
			stdout.Write(r.Data)
		}
		out.NextSeq = r.Seq
		return nil
	})
	out.Stdout, out.Stderr = text(stdout.String()), text(stderr.String())
	switch {
	case err == nil, errors.Is(err, errFull):
	case fctx.Err() != nil && ctx.Err() == nil:
		// Waited long enough: the command goes on.
	case errors.Is(err, cove.ErrStreamEnded):
		// The stream broke; the caller resumes from NextSeq.
	default:
		return out, toolError(err)
	}
	return out, nil
}

// text makes output valid UTF-8 for a JSON string, marking bytes that are
// not.
func text(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

type SendInputInput struct {
	Sandbox   string `json:"sandbox" jsonschema:"the sandbox's id or name"`
	CommandID string `json:"command_id"`
	Input     string `json:"input" jsonschema:"text to write to the command's stdin; add a newline to end a line"`
	Close     bool   `json:"close,omitempty" jsonschema:"close stdin after the input"`
}

type SendInputOutput struct {
	Sent   int  `json:"sent"`
	Closed bool `json:"closed"`
}

func (t *tools) sendInput(ctx context.Context, _ *mcp.CallToolRequest, in SendInputInput) (*mcp.CallToolResult, SendInputOutput, error) {
	if err := t.cl.Stdin(ctx, in.Sandbox, in.CommandID, strings.NewReader(in.Input), in.Close); err != nil {
		return nil, SendInputOutput{}, toolError(err)
	}
	return nil, SendInputOutput{Sent: len(in.Input), Closed: in.Close}, nil
}

type ReadFileInput struct {
	Sandbox string `json:"sandbox" jsonschema:"the sandbox's id or name"`
	Path    string `json:"path" jsonschema:"absolute, or relative to the sandbox's workdir"`
}

type FileContent struct {
	Path     string `json:"path"`
	Version  string `json:"version"`
	Size     int64  `json:"size"`
	Encoding string `json:"encoding" jsonschema:"utf-8 or base64"`
	Content  string `json:"content"`
}

func (t *tools) readFile(ctx context.Context, _ *mcp.CallToolRequest, in ReadFileInput) (*mcp.CallToolResult, FileContent, error) {
	f, b, err := t.read(ctx, in.Sandbox, in.Path)
	if err != nil {
		return nil, FileContent{}, err
	}
	out := FileContent{Path: in.Path, Version: f.Version, Size: int64(len(b)), Encoding: "utf-8", Content: string(b)}
	if !utf8.Valid(b) {
		out.Encoding, out.Content = "base64", base64.StdEncoding.EncodeToString(b)
	}
	return nil, out, nil
}

// read downloads a whole file of at most maxFileBytes, digest-checked.
func (t *tools) read(ctx context.Context, ref, path string) (*cove.FileReader, []byte, error) {
	f, err := t.cl.ReadFile(ctx, ref, path)
	if err != nil {
		return nil, nil, toolError(err)
	}
	defer f.Close()
	if f.Size > maxFileBytes {
		return nil, nil, fmt.Errorf("%s is %d bytes, more than the %d one call reads: read parts of it with run_command (head, sed -n, grep)", path, f.Size, maxFileBytes)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxFileBytes+1))
	if err != nil {
		return nil, nil, toolError(err)
	}
	if len(b) > maxFileBytes {
		return nil, nil, fmt.Errorf("%s is more than the %d bytes one call reads", path, maxFileBytes)
	}
	return f, b, nil
}

func (t *tools) readResource(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	uri := req.Params.URI
	rest, ok := strings.CutPrefix(uri, "cove://sandboxes/")
	ref, path, ok2 := strings.Cut(rest, "/files/")
	if !ok || !ok2 || ref == "" || path == "" {
		return nil, mcp.ResourceNotFoundError(uri)
	}
	_, b, err := t.read(ctx, ref, "/"+path)
	if err != nil {
		var ae *api.Error
		if errors.As(err, &ae) && ae.Code == api.CodeNotFound {
			return nil, mcp.ResourceNotFoundError(uri)
		}
		return nil, err
	}
	c := &mcp.ResourceContents{URI: uri}
	if utf8.Valid(b) {
		c.MIMEType, c.Text = "text/plain; charset=utf-8", string(b)
	} else {
		c.MIMEType, c.Blob = "application/octet-stream", b
	}
	return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{c}}, nil
}

type WriteFileInput struct {
	Sandbox         string `json:"sandbox" jsonschema:"the sandbox's id or name"`
	Path            string `json:"path"`
	Content         string `json:"content"`
	Encoding        string `json:"encoding,omitempty" jsonschema:"utf-8 (default) or base64"`
	ExpectedVersion string `json:"expected_version,omitempty" jsonschema:"write only if the file is at this version; none: only if it does not exist"`
	Mode            string `json:"mode,omitempty" jsonschema:"permission bits in octal, e.g. 0755"`
}

// FileVersion is a file after a write.
type FileVersion struct {
	Path    string `json:"path"`
	Version string `json:"version"`
	Size    int64  `json:"size"`
}

func (t *tools) writeFile(ctx context.Context, _ *mcp.CallToolRequest, in WriteFileInput) (*mcp.CallToolResult, FileVersion, error) {
	body := []byte(in.Content)
	switch in.Encoding {
	case "", "utf-8":
	case "base64":
		b, err := base64.StdEncoding.DecodeString(in.Content)
		if err != nil {
			return nil, FileVersion{}, fmt.Errorf("content is not base64: %v", err)
		}
		body = b
	default:
		return nil, FileVersion{}, fmt.Errorf("encoding %q: want utf-8 or base64", in.Encoding)
	}
	var opts []cove.FileOption
	switch in.ExpectedVersion {
	case "":
	case "none":
		opts = append(opts, cove.IfNoneMatch())
	default:
		opts = append(opts, cove.IfMatch(in.ExpectedVersion))
	}
	if in.Mode != "" {
		opts = append(opts, cove.WithMode(in.Mode))
	}
	e, err := t.cl.WriteFile(ctx, in.Sandbox, in.Path, strings.NewReader(string(body)), opts...)
	if err != nil {
		return nil, FileVersion{}, staleHint(toolError(err))
	}
	return nil, FileVersion{Path: e.Path, Version: e.Version, Size: e.Size}, nil
}

// staleHint tells a model what to do after a lost-update refusal.
func staleHint(err error) error {
	if strings.HasPrefix(err.Error(), string(api.CodePreconditionFailed)+":") {
		return fmt.Errorf("%w (the file changed since you read it: read_file again, then write with its new version)", err)
	}
	return err
}

type EditFileInput struct {
	Sandbox         string         `json:"sandbox" jsonschema:"the sandbox's id or name"`
	Path            string         `json:"path"`
	Edits           []api.FileEdit `json:"edits" jsonschema:"replacements; each old text must occur exactly once"`
	ExpectedVersion string         `json:"expected_version,omitempty" jsonschema:"edit only if the file is at this version"`
}

func (t *tools) editFile(ctx context.Context, _ *mcp.CallToolRequest, in EditFileInput) (*mcp.CallToolResult, FileVersion, error) {
	if len(in.Edits) == 0 {
		return nil, FileVersion{}, errors.New("edits is empty")
	}
	var opts []cove.FileOption
	if in.ExpectedVersion != "" {
		opts = append(opts, cove.IfMatch(in.ExpectedVersion))
	}
	e, err := t.cl.EditFile(ctx, in.Sandbox, in.Path, in.Edits, opts...)
	if err != nil {
		return nil, FileVersion{}, staleHint(toolError(err))
	}
	return nil, FileVersion{Path: e.Path, Version: e.Version, Size: e.Size}, nil
}

type ListFilesInput struct {
	Sandbox string `json:"sandbox" jsonschema:"the sandbox's id or name"`
	Path    string `json:"path,omitempty" jsonschema:"a directory; the workdir if empty"`
	Depth   int    `json:"depth,omitempty" jsonschema:"levels to list (default 1)"`
}

type ListFilesOutput struct {
	Entries []api.FileEntry `json:"entries"`
	More    bool            `json:"more"`
}

func (t *tools) listFiles(ctx context.Context, _ *mcp.CallToolRequest, in ListFilesInput) (*mcp.CallToolResult, ListFilesOutput, error) {
	dir := in.Path
	if dir == "" {
		sb, err := t.cl.GetSandbox(ctx, in.Sandbox)
		if err != nil {
			return nil, ListFilesOutput{}, toolError(err)
		}
		dir = sb.Workdir
	}
	page, err := t.cl.ListFiles(ctx, in.Sandbox, dir, max(in.Depth, 1), 500, "")
	if err != nil {
		return nil, ListFilesOutput{}, toolError(err)
	}
	return nil, ListFilesOutput{Entries: append([]api.FileEntry{}, page.Items...), More: page.NextCursor != ""}, nil
}

type SandboxNetworkInput struct {
	Sandbox string   `json:"sandbox" jsonschema:"the sandbox's id or name"`
	Allow   []string `json:"allow,omitempty" jsonschema:"destinations to add to the policy"`
}

type SandboxNetworkOutput struct {
	Allow        []string                 `json:"allow"`
	Denied       []api.NetworkObservation `json:"denied"`
	Observations []api.NetworkObservation `json:"observations"`
}

func (t *tools) sandboxNetwork(ctx context.Context, _ *mcp.CallToolRequest, in SandboxNetworkInput) (*mcp.CallToolResult, SandboxNetworkOutput, error) {
	if len(in.Allow) > 0 {
		v, err := t.cl.Network(ctx, in.Sandbox)
		if err != nil {
			return nil, SandboxNetworkOutput{}, toolError(err)
		}
		policy := v.Policy
		for _, a := range in.Allow {
			if !contains(policy.Allow, a) {
				policy.Allow = append(policy.Allow, a)
			}
		}
		if _, err := t.cl.UpdateSandbox(ctx, in.Sandbox, api.UpdateSandboxRequest{Network: &policy}); err != nil {
			return nil, SandboxNetworkOutput{}, toolError(err)
		}
	}
	v, err := t.cl.Network(ctx, in.Sandbox)
	if err != nil {
		return nil, SandboxNetworkOutput{}, toolError(err)
	}
	out := SandboxNetworkOutput{Allow: append([]string{}, v.Policy.Allow...), Denied: []api.NetworkObservation{}, Observations: append([]api.NetworkObservation{}, v.Observations...)}
	for _, o := range v.Observations {
		if o.Decision == "denied" {
			out.Denied = append(out.Denied, o)
		}
	}
	return nil, out, nil
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

type SandboxRef struct {
	Sandbox string `json:"sandbox" jsonschema:"the sandbox's id or name"`
}

func (t *tools) sleepSandbox(ctx context.Context, _ *mcp.CallToolRequest, in SandboxRef) (*mcp.CallToolResult, Sandbox, error) {
	if _, err := t.cl.SleepSandbox(ctx, in.Sandbox); err != nil {
		return nil, Sandbox{}, toolError(err)
	}
	sb, err := t.cl.WaitSandbox(ctx, in.Sandbox, api.StateAsleep, 2*time.Minute)
	if err != nil {
		return nil, Sandbox{}, toolError(err)
	}
	return nil, sandboxOf(sb), nil
}

func (t *tools) wakeSandbox(ctx context.Context, _ *mcp.CallToolRequest, in SandboxRef) (*mcp.CallToolResult, Sandbox, error) {
	if _, err := t.cl.WakeSandbox(ctx, in.Sandbox); err != nil {
		return nil, Sandbox{}, toolError(err)
	}
	sb, err := t.cl.WaitSandbox(ctx, in.Sandbox, api.StateRunning, 2*time.Minute)
	if err != nil {
		return nil, Sandbox{}, toolError(err)
	}
	return nil, sandboxOf(sb), nil
}

// SnapshotIn names a sandbox and the snapshot to make of it.
type SnapshotIn struct {
	Sandbox string `json:"sandbox" jsonschema:"the sandbox's id or name"`
	Name    string `json:"name" jsonschema:"the snapshot's name, unique in the team: 1 to 63 of a-z, 0-9 and -"`
}

// Snapshot is what the tools say of a snapshot.
type Snapshot struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	SandboxID string `json:"sandbox_id"`
	SizeBytes int64  `json:"size_bytes"`
	Digest    string `json:"digest"`
}

func (t *tools) snapshotSandbox(ctx context.Context, _ *mcp.CallToolRequest, in SnapshotIn) (*mcp.CallToolResult, Snapshot, error) {
	if in.Sandbox == "" || in.Name == "" {
		return nil, Snapshot{}, errors.New("sandbox and name are required")
	}
	s, err := t.cl.CreateSnapshot(ctx, in.Sandbox, in.Name)
	if err != nil {
		return nil, Snapshot{}, toolError(err)
	}
	return nil, Snapshot{ID: s.ID, Name: s.Name, SandboxID: s.SandboxID, SizeBytes: s.SizeBytes, Digest: s.Digest}, nil
}

// ForkIn names a sandbox and how many forks to make of it.
type ForkIn struct {
	Sandbox string   `json:"sandbox" jsonschema:"the sandbox's id or name"`
	Count   int      `json:"count" jsonschema:"how many new sandboxes to make"`
	Names   []string `json:"names,omitempty" jsonschema:"names of the new sandboxes, one per sandbox"`
}

// Forks are the sandboxes a fork made.
type Forks struct {
	Sandboxes []Sandbox `json:"sandboxes"`
}

func (t *tools) forkSandbox(ctx context.Context, _ *mcp.CallToolRequest, in ForkIn) (*mcp.CallToolResult, Forks, error) {
	if in.Sandbox == "" {
		return nil, Forks{}, errors.New("sandbox is required")
	}
	items, err := t.cl.ForkSandbox(ctx, in.Sandbox, api.ForkSandboxRequest{Count: in.Count, Names: in.Names}, true)
	if err != nil {
		return nil, Forks{}, toolError(err)
	}
	out := Forks{Sandboxes: []Sandbox{}}
	for _, sb := range items {
		out.Sandboxes = append(out.Sandboxes, sandboxOf(sb))
	}
	return nil, out, nil
}

func (t *tools) terminateSandbox(ctx context.Context, _ *mcp.CallToolRequest, in SandboxRef) (*mcp.CallToolResult, Sandbox, error) {
	sb, err := t.cl.TerminateSandbox(ctx, in.Sandbox)
	if err != nil {
		return nil, Sandbox{}, toolError(err)
	}
	return nil, sandboxOf(sb), nil
}
