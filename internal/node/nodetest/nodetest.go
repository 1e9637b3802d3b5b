// Package nodetest is an in-memory node for unit tests of the control
// plane and the API: sandboxes are records, commands do what the test
// says, output is kept in memory. It has the method set of lifecycle.Node
// and needs no root, runc or agent.
package nodetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/node"
)

// Sandbox states of the fake.
const (
	Running = "running"
	Saved   = "saved" // asleep: its files kept, no runtime
)

// Sandbox is what the fake keeps of a sandbox.
type Sandbox struct {
	Spec     node.SandboxSpec
	State    string
	Hostname string
	Policy   api.NetworkPolicy
	InSetup  bool // the setup policy applies
	// Inject are the secrets given by SetInjectSecrets.
	Inject   []node.InjectSecret
	Files    map[string][]byte
	Commands []node.ExecSpec
}

// Command is what a test makes a started command do: write to out, then
// return how it ended. It runs on a goroutine of the node.
type Command func(ctx context.Context, spec node.ExecSpec, out *Output) node.Exit

// Node is the fake. Set OnExit before use; Close waits for its goroutines.
type Node struct {
	// OnExit is told when a command ends, as a real node tells the server.
	OnExit node.ExitFunc
	// Run is what every command does; nil ends it at once with exit 0.
	Run Command
	// StartGate, when set, holds every Start until it is closed or the
	// start's ctx is done.
	StartGate chan struct{}
	// SleepGate, when set, holds every FinishSleep (the sandbox stays
	// sleeping) until it is closed or the sleep's ctx is done.
	SleepGate chan struct{}
	// PortAddr, when set, is where DialPort connects for a sandbox's port
	// (a test's own listener); nil refuses every dial.
	PortAddr func(sandboxID string, port int) string

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu        sync.Mutex
	sandboxes map[string]*Sandbox
	saves     map[string]map[string][]byte // named copies of saves
	outputs   map[string]*Output           // by sandbox/command
	fail      map[string]error             // by operation
	calls     []string
	stats     map[string]node.Stats // set by SetStats
	observed  []node.Observation    // network reports not drained yet
	published map[string][]int      // ports by sandbox
	gpus      node.GPUs             // set by SetGPUs
	volumes   map[string]*volume    // by ID (volumes.go)
}

// New returns an empty node.
func New() *Node {
	ctx, cancel := context.WithCancel(context.Background())
	return &Node{
		ctx: ctx, cancel: cancel,
		sandboxes: map[string]*Sandbox{},
		saves:     map[string]map[string][]byte{},
		outputs:   map[string]*Output{},
		fail:      map[string]error{},
	}
}

// Close stops running commands and waits for them.
func (n *Node) Close() {
	n.cancel()
	n.wg.Wait()
}

// Fail makes the next calls of op ("start", "wake", "sleep", "exec",
// "destroy") fail with err; nil clears it.
func (n *Node) Fail(op string, err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err == nil {
		delete(n.fail, op)
		return
	}
	n.fail[op] = err
}

// Calls lists the calls made, in order, as "op id".
func (n *Node) Calls() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.calls)
}

// Sandbox returns a copy of what the node has of a sandbox.
func (n *Node) Sandbox(id string) (Sandbox, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	s, ok := n.sandboxes[id]
	if !ok {
		return Sandbox{}, false
	}
	c := *s
	c.Commands = slices.Clone(s.Commands)
	return c, true
}

// record notes a call and returns the failure set for its operation.
func (n *Node) record(op, id string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.calls = append(n.calls, op+" "+id)
	return n.fail[op]
}

func (n *Node) running(id string) (*Sandbox, error) {
	s, ok := n.sandboxes[id]
	if !ok || s.State != Running {
		return nil, api.Errorf(api.CodeConflict, "sandbox %s is not running", id)
	}
	return s, nil
}

// Admit implements lifecycle.Node: it fails as Fail("admit", …) says.
func (n *Node) Admit(ctx context.Context, spec node.SandboxSpec) error {
	return n.record("admit", spec.ID)
}

// Start implements lifecycle.Node.
func (n *Node) Start(ctx context.Context, spec node.SandboxSpec) error {
	if err := n.record("start", spec.ID); err != nil {
		return err
	}
	if n.StartGate != nil {
		select {
		case <-n.StartGate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.haveVolumesLocked(spec); err != nil {
		return err
	}
	files := map[string][]byte{}
	for i := len(spec.Layers) - 1; i >= 0; i-- {
		for k, v := range n.saves[spec.Layers[i].Snapshot] {
			files[k] = v
		}
	}
	n.sandboxes[spec.ID] = &Sandbox{
		Spec: spec, State: Running, Hostname: spec.Hostname, Policy: spec.Network,
		Files: files,
	}
	return nil
}

// Wake implements lifecycle.Node: the files saved at sleep come back.
func (n *Node) Wake(ctx context.Context, spec node.SandboxSpec) error {
	if err := n.record("wake", spec.ID); err != nil {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	s, ok := n.sandboxes[spec.ID]
	if !ok || s.State != Saved {
		return fmt.Errorf("no save of %s", spec.ID)
	}
	if err := n.haveVolumesLocked(spec); err != nil {
		return err
	}
	s.Spec, s.State, s.Hostname, s.Policy = spec, Running, spec.Hostname, spec.Network
	return nil
}

// Attach implements lifecycle.Node: a sandbox the fake knows as running is
// found again, and commands it has no output of are lost.
func (n *Node) Attach(ctx context.Context, spec node.SandboxSpec, running []string) error {
	if err := n.record("attach", spec.ID); err != nil {
		return err
	}
	n.mu.Lock()
	_, err := n.running(spec.ID)
	n.mu.Unlock()
	if err != nil {
		return err
	}
	n.Lose(spec.ID, running)
	return nil
}

// Destroy implements lifecycle.Node.
func (n *Node) Destroy(ctx context.Context, id string) error {
	if err := n.record("destroy", id); err != nil {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.sandboxes, id)
	for key, o := range n.outputs {
		if strings.HasPrefix(key, id+"/") {
			o.close()
			delete(n.outputs, key)
		}
	}
	return nil
}

// DestroyRuntime implements lifecycle.Node: a saved sandbox keeps its save.
func (n *Node) DestroyRuntime(ctx context.Context, id string) error {
	if err := n.record("destroy-runtime", id); err != nil {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if s, ok := n.sandboxes[id]; ok && s.State == Running {
		delete(n.sandboxes, id)
	}
	return nil
}

// FinishSleep implements lifecycle.Node.
func (n *Node) FinishSleep(ctx context.Context, id string) (node.SaveInfo, error) {
	if err := n.record("sleep", id); err != nil {
		return node.SaveInfo{}, err
	}
	if n.SleepGate != nil {
		select {
		case <-n.SleepGate:
		case <-ctx.Done():
			return node.SaveInfo{}, ctx.Err()
		}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	s, ok := n.sandboxes[id]
	if !ok {
		return node.SaveInfo{}, fmt.Errorf("no sandbox %s", id)
	}
	s.State = Saved
	size := 0
	for _, b := range s.Files {
		size += len(b)
	}
	return node.SaveInfo{DataBytes: int64(size), ArchiveBytes: int64(size)}, nil
}

// CopySave implements lifecycle.Node: a save is a saved sandbox's files, or
// a named copy of them.
func (n *Node) CopySave(ctx context.Context, from, to string) (node.SaveInfo, error) {
	if err := n.record("copy-save", from); err != nil {
		return node.SaveInfo{}, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	var files map[string][]byte
	if s, ok := n.sandboxes[from]; ok && s.State == Saved {
		files = s.Files
	} else if f, ok := n.saves[from]; ok {
		files = f
	} else {
		return node.SaveInfo{}, api.Errorf(api.CodeNotFound, "no save %s", from)
	}
	cp := map[string][]byte{}
	size := 0
	for k, v := range files {
		cp[k] = v
		size += len(v)
	}
	if strings.HasPrefix(to, "sbx_") {
		n.sandboxes[to] = &Sandbox{State: Saved, Files: cp}
	} else {
		n.saves[to] = cp
	}
	return node.SaveInfo{DataBytes: int64(size), ArchiveBytes: int64(size)}, nil
}

// Snapshot implements lifecycle.Node: a snapshot is a named copy of a
// sandbox's files (running or saved), which a start on it begins with.
func (n *Node) Snapshot(ctx context.Context, id, snap string, asleep bool, save string) (node.SaveInfo, error) {
	if err := n.record("snapshot", id); err != nil {
		return node.SaveInfo{}, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	s, ok := n.sandboxes[id]
	if !ok || (asleep != (s.State == Saved)) {
		return node.SaveInfo{}, api.Errorf(api.CodeNotFound, "no sandbox %s to snapshot", id)
	}
	cp := map[string][]byte{}
	size := 0
	for k, v := range s.Files {
		cp[k] = v
		size += len(v)
	}
	n.saves[snap] = cp
	return node.SaveInfo{DataBytes: int64(size), ArchiveBytes: int64(size), SHA256: fmt.Sprintf("%064x", size)}, nil
}

// DropSnapshot implements lifecycle.Node.
func (n *Node) DropSnapshot(ctx context.Context, snap string) error {
	n.mu.Lock()
	delete(n.saves, snap)
	n.mu.Unlock()
	return n.record("drop-snapshot", snap)
}

// DropSave implements lifecycle.Node.
func (n *Node) DropSave(ctx context.Context, id string) error {
	n.mu.Lock()
	delete(n.saves, id)
	n.mu.Unlock()
	return n.record("drop-save", id)
}

// Known implements lifecycle.Node.
func (n *Node) Known(ctx context.Context) ([]string, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	ids := make([]string, 0, len(n.sandboxes))
	for id := range n.sandboxes {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids, nil
}

// Lose implements lifecycle.Node.
func (n *Node) Lose(id string, commands []string) {
	for _, cmd := range commands {
		o := n.output(id, cmd)
		if e := o.Exit(); e != nil {
			n.OnExit(id, cmd, *e, false)
			continue
		}
		o.End(node.Exit{ExitCode: -1})
		n.OnExit(id, cmd, node.Exit{ExitCode: -1}, true)
	}
}

// SetInjectSecrets implements lifecycle.Node.
func (n *Node) SetInjectSecrets(id string, inject []node.InjectSecret) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if s, ok := n.sandboxes[id]; ok {
		s.Inject = slices.Clone(inject)
	}
	return nil
}

// SetPolicy implements lifecycle.Node.
func (n *Node) SetPolicy(id string, p api.NetworkPolicy) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if s, ok := n.sandboxes[id]; ok {
		s.Policy = p
	}
	return nil
}

// UseSetupPolicy implements lifecycle.Node.
func (n *Node) UseSetupPolicy(id string, on bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if s, ok := n.sandboxes[id]; ok {
		s.InSetup = on
	}
}

// SetHostname implements lifecycle.Node.
func (n *Node) SetHostname(ctx context.Context, id, name string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	s, err := n.running(id)
	if err != nil {
		return err
	}
	s.Hostname = name
	return nil
}

// Observe adds network reports for DrainObservations to hand over, as the
// node's gateway would.
func (n *Node) Observe(obs ...node.Observation) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.observed = append(n.observed, obs...)
}

// DrainObservations implements lifecycle.Node.
func (n *Node) DrainObservations() []node.Observation {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := n.observed
	n.observed = nil
	return out
}

// PendingObservations implements lifecycle.Node.
func (n *Node) PendingObservations(id string) []api.NetworkObservation {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []api.NetworkObservation
	for _, o := range n.observed {
		if o.SandboxID == id {
			out = append(out, o.NetworkObservation)
		}
	}
	return out
}

func (n *Node) output(sandboxID, commandID string) *Output {
	n.mu.Lock()
	defer n.mu.Unlock()
	key := sandboxID + "/" + commandID
	o, ok := n.outputs[key]
	if !ok {
		o = NewOutput()
		n.outputs[key] = o
	}
	return o
}

// FirstPID is the pid of a sandbox's first command on the fake: the
// next ones count up from it, as in a fresh pid namespace whose init is
// pid 1.
const FirstPID = 2

// Exec implements lifecycle.Node: the command runs Run on a goroutine of the
// node, and its end is reported to OnExit. Its pid is FirstPID plus the
// number of commands the sandbox ran before it.
func (n *Node) Exec(ctx context.Context, sandboxID string, spec node.ExecSpec) (node.Started, error) {
	if err := n.record("exec", sandboxID); err != nil {
		return node.Started{}, err
	}
	n.mu.Lock()
	s, err := n.running(sandboxID)
	var pid int
	if err == nil {
		pid = FirstPID + len(s.Commands)
		s.Commands = append(s.Commands, spec)
	}
	n.mu.Unlock()
	if err != nil {
		return node.Started{}, err
	}
	o := n.output(sandboxID, spec.ID)
	run := n.Run
	n.wg.Go(func() {
		exit := node.Exit{}
		if run != nil {
			exit = run(n.ctx, spec, o)
		}
		if n.ctx.Err() != nil || o.Ended() {
			return // the node closed, or the command was lost meanwhile
		}
		o.End(exit)
		n.OnExit(sandboxID, spec.ID, exit, false)
	})
	return node.Started{PID: pid}, nil
}

// Output implements lifecycle.Node.
func (n *Node) Output(sandboxID, commandID string) (node.Output, error) {
	return n.output(sandboxID, commandID), nil
}

// Stdin implements lifecycle.Node: the input is echoed to stdout.
func (n *Node) Stdin(ctx context.Context, sandboxID, commandID string, r io.Reader, eof bool) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	n.output(sandboxID, commandID).Write("stdout", b)
	return nil
}

// Signal implements lifecycle.Node: the command ends killed by it.
func (n *Node) Signal(ctx context.Context, sandboxID, commandID, sig string) error {
	o := n.output(sandboxID, commandID)
	if o.Ended() {
		return api.Errorf(api.CodeNotFound, "command %s has ended", commandID)
	}
	o.End(node.Exit{ExitCode: -1, Signal: sig})
	n.OnExit(sandboxID, commandID, node.Exit{ExitCode: -1, Signal: sig}, false)
	return nil
}

// Resize implements lifecycle.Node.
func (n *Node) Resize(ctx context.Context, sandboxID, commandID string, size node.TermSize) error {
	return nil
}

func (n *Node) files(sandboxID string) (map[string][]byte, error) {
	s, err := n.running(sandboxID)
	if err != nil {
		return nil, err
	}
	return s.Files, nil
}

func entry(p string, b []byte) api.FileEntry {
	return api.FileEntry{
		Name: path.Base(p), Path: p, Type: api.FileType("file"), Size: int64(len(b)),
		Mode: "0644", MTime: time.Unix(0, 0).UTC(), Version: version(b), UID: 1000, GID: 1000,
	}
}

func version(b []byte) string { return "v" + strconv.Itoa(len(b)) + "-" + strconv.Itoa(int(crc(b))) }

func crc(b []byte) uint32 {
	var h uint32 = 2166136261
	for _, c := range b {
		h = (h ^ uint32(c)) * 16777619
	}
	return h
}

func notFound(p string) error { return api.Errorf(api.CodeNotFound, "%s does not exist", p) }

// StatFile implements lifecycle.Node.
func (n *Node) StatFile(ctx context.Context, sandboxID, p string) (api.FileEntry, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	fs, err := n.files(sandboxID)
	if err != nil {
		return api.FileEntry{}, err
	}
	b, ok := fs[p]
	if !ok {
		return api.FileEntry{}, notFound(p)
	}
	return entry(p, b), nil
}

// ListFiles implements lifecycle.Node: the files directly under the path.
func (n *Node) ListFiles(ctx context.Context, sandboxID string, spec node.ListSpec) (api.List[api.FileEntry], error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	fs, err := n.files(sandboxID)
	if err != nil {
		return api.List[api.FileEntry]{}, err
	}
	out := api.List[api.FileEntry]{Items: []api.FileEntry{}}
	for p, b := range fs {
		if path.Dir(p) == spec.Path {
			out.Items = append(out.Items, entry(p, b))
		}
	}
	sort.Slice(out.Items, func(i, j int) bool { return out.Items[i].Path < out.Items[j].Path })
	return out, nil
}

// ReadFile implements lifecycle.Node; ranges and conditions are ignored.
func (n *Node) ReadFile(ctx context.Context, sandboxID string, spec node.ReadSpec) (*node.Content, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	fs, err := n.files(sandboxID)
	if err != nil {
		return nil, err
	}
	b, ok := fs[spec.Path]
	if !ok {
		return nil, notFound(spec.Path)
	}
	return &node.Content{
		Status: 200, ContentLength: int64(len(b)), ETag: `"` + version(b) + `"`,
		Body: io.NopCloser(bytes.NewReader(b)),
	}, nil
}

// WriteFile implements lifecycle.Node, with If-Match and If-None-Match.
func (n *Node) WriteFile(ctx context.Context, sandboxID string, spec node.WriteSpec, body io.Reader) (api.FileEntry, bool, error) {
	data, err := io.ReadAll(body)
	if err != nil {
		return api.FileEntry{}, false, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	fs, err := n.files(sandboxID)
	if err != nil {
		return api.FileEntry{}, false, err
	}
	old, exists := fs[spec.Path]
	if spec.IfNoneMatch && exists {
		return api.FileEntry{}, false, api.Errorf(api.CodePreconditionFailed, "%s exists", spec.Path)
	}
	if len(spec.IfMatch) > 0 && (!exists || !slices.ContainsFunc(spec.IfMatch, func(v string) bool { return v == "*" || v == version(old) })) {
		return api.FileEntry{}, false, api.Errorf(api.CodePreconditionFailed, "%s changed", spec.Path)
	}
	fs[spec.Path] = data
	return entry(spec.Path, data), !exists, nil
}

// EditFile implements lifecycle.Node.
func (n *Node) EditFile(ctx context.Context, sandboxID string, spec node.EditSpec) (api.FileEntry, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	fs, err := n.files(sandboxID)
	if err != nil {
		return api.FileEntry{}, err
	}
	b, ok := fs[spec.Path]
	if !ok {
		return api.FileEntry{}, notFound(spec.Path)
	}
	s := string(b)
	for _, e := range spec.Edits {
		if strings.Count(s, e.Old) != 1 {
			return api.FileEntry{}, api.Errorf(api.CodeConflict, "%q does not occur exactly once", e.Old)
		}
		s = strings.Replace(s, e.Old, e.New, 1)
	}
	fs[spec.Path] = []byte(s)
	return entry(spec.Path, fs[spec.Path]), nil
}

// Mkdir implements lifecycle.Node; the fake has no directories.
func (n *Node) Mkdir(ctx context.Context, sandboxID string, spec node.MkdirSpec) (api.FileEntry, error) {
	return api.FileEntry{Name: path.Base(spec.Path), Path: spec.Path, Type: api.FileType("dir"), Mode: "0755"}, nil
}

// MoveFile implements lifecycle.Node.
func (n *Node) MoveFile(ctx context.Context, sandboxID string, spec node.MoveSpec) (api.FileEntry, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	fs, err := n.files(sandboxID)
	if err != nil {
		return api.FileEntry{}, err
	}
	b, ok := fs[spec.From]
	if !ok {
		return api.FileEntry{}, notFound(spec.From)
	}
	if _, exists := fs[spec.To]; exists && !spec.Overwrite {
		return api.FileEntry{}, api.Errorf(api.CodeConflict, "%s exists", spec.To)
	}
	delete(fs, spec.From)
	fs[spec.To] = b
	return entry(spec.To, b), nil
}

// RemoveFile implements lifecycle.Node.
func (n *Node) RemoveFile(ctx context.Context, sandboxID, p string, recursive bool) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	fs, err := n.files(sandboxID)
	if err != nil {
		return err
	}
	if _, ok := fs[p]; !ok {
		return notFound(p)
	}
	delete(fs, p)
	return nil
}

// ReadArchive implements lifecycle.Node: the archive WriteArchive kept as
// PATH/.archive comes back as it was; the fake has no other archives.
func (n *Node) ReadArchive(ctx context.Context, sandboxID, p string) (io.ReadCloser, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if s, ok := n.sandboxes[sandboxID]; ok && s.State == Running {
		if b, ok := s.Files[p+"/.archive"]; ok {
			return io.NopCloser(bytes.NewReader(b)), nil
		}
	}
	return nil, api.Errorf(api.CodeUnprocessable, "the fake node has no archives")
}

// WriteArchive implements lifecycle.Node: the fake reads the whole body (as
// the agent does before anything lands) and keeps it as the file
// PATH/.archive; a body that fails leaves nothing.
func (n *Node) WriteArchive(ctx context.Context, sandboxID string, spec node.ArchiveSpec, body io.Reader) (api.ArchiveResult, error) {
	if err := n.record("write_archive", sandboxID); err != nil {
		return api.ArchiveResult{}, err
	}
	b, err := io.ReadAll(body)
	if err != nil {
		return api.ArchiveResult{}, api.Errorf(api.CodeInvalidArgument, "the archive was cut short: %v; nothing was extracted", err)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	s, err := n.running(sandboxID)
	if err != nil {
		return api.ArchiveResult{}, err
	}
	if s.Files == nil {
		s.Files = map[string][]byte{}
	}
	s.Files[spec.Path+"/.archive"] = b
	return api.ArchiveResult{Path: spec.Path, Entries: 1, Bytes: int64(len(b))}, nil
}

// CloneGit implements lifecycle.Node: the fake keeps the spec (token
// included, so tests see what reached the node) as PATH/.git-spec, the
// clone's host IDs as PATH/.git-ids ("hostid size"), and
// answers a fixed commit; Fail("clone", …) makes it fail.
func (n *Node) CloneGit(ctx context.Context, sandboxID string, spec node.GitSpec) (string, error) {
	if err := n.record("clone", sandboxID); err != nil {
		return "", err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	s, err := n.running(sandboxID)
	if err != nil {
		return "", err
	}
	if s.Files == nil {
		s.Files = map[string][]byte{}
	}
	s.Files[spec.Path+"/.git-spec"] = []byte(fmt.Sprintf("%s %s %d %s", spec.URL, spec.Ref, spec.Depth, spec.Token))
	s.Files[spec.Path+"/.git-ids"] = []byte(fmt.Sprint(spec.IDs.HostID, spec.IDs.Size))
	return "0123456789abcdef0123456789abcdef01234567", nil
}

// Output is a command's output in memory; it implements node.Output.
type Output struct {
	mu      sync.Mutex
	chunks  []node.Chunk
	sizes   [2]int64
	exit    *node.Exit
	closed  bool
	changed chan struct{}
}

// NewOutput returns an empty output.
func NewOutput() *Output { return &Output{changed: make(chan struct{})} }

func (o *Output) notify() {
	close(o.changed)
	o.changed = make(chan struct{})
}

// Write appends a chunk to a stream ("stdout" or "stderr").
func (o *Output) Write(stream string, b []byte) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.exit != nil || o.closed || len(b) == 0 {
		return
	}
	o.chunks = append(o.chunks, node.Chunk{Seq: int64(len(o.chunks) + 1), Stream: stream, Data: bytes.Clone(b)})
	if stream == "stderr" {
		o.sizes[1] += int64(len(b))
	} else {
		o.sizes[0] += int64(len(b))
	}
	o.notify()
}

// End records the exit; later writes are dropped.
func (o *Output) End(e node.Exit) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.exit == nil {
		o.exit = &e
		o.notify()
	}
}

func (o *Output) close() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.closed {
		o.closed = true
		o.notify()
	}
}

// errClosed is what readers get once the output's sandbox is gone.
var errClosed = errors.New("output closed")

// Read implements node.Output.
func (o *Output) Read(ctx context.Context, after int64, follow bool, fn func(node.Chunk) error) (*node.Exit, error) {
	for {
		o.mu.Lock()
		var todo []node.Chunk
		if after < int64(len(o.chunks)) {
			todo = slices.Clone(o.chunks[max(after, 0):])
		}
		exit, closed, changed := o.exit, o.closed, o.changed
		o.mu.Unlock()
		for _, c := range todo {
			if err := fn(c); err != nil {
				return nil, err
			}
			after = c.Seq
		}
		if len(todo) > 0 {
			continue // more may have come while fn ran
		}
		switch {
		case exit != nil:
			e := *exit
			return &e, nil
		case closed:
			return nil, errClosed
		case !follow:
			return nil, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Stream implements node.Output.
func (o *Output) Stream(name string) (io.ReaderAt, int64, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	var b []byte
	for _, c := range o.chunks {
		if c.Stream == name {
			b = append(b, c.Data...)
		}
	}
	return bytes.NewReader(b), int64(len(b)), nil
}

// LastSeq implements node.Output.
func (o *Output) LastSeq() int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return int64(len(o.chunks))
}

// Sizes implements node.Output.
func (o *Output) Sizes() (stdout, stderr int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.sizes[0], o.sizes[1]
}

// Exit implements node.Output.
func (o *Output) Exit() *node.Exit {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.exit == nil {
		return nil
	}
	e := *o.exit
	return &e
}

// Ended implements node.Output.
func (o *Output) Ended() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.exit != nil || o.closed
}

// Close implements node.Output: a reader's hold costs the fake nothing.
func (o *Output) Close() error { return nil }

// Changed implements node.Output.
func (o *Output) Changed() <-chan struct{} {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.changed
}

// WatchFiles implements lifecycle.Node: the fake has no watches.
func (n *Node) WatchFiles(ctx context.Context, sandboxID string, spec node.WatchSpec) (node.FileWatch, error) {
	return nil, api.Errorf(api.CodeUnprocessable, "the fake node has no file watches")
}
