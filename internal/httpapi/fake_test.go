package httpapi

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/assets"
	"github.com/cove-dev/cove/internal/control/files"
	"github.com/cove-dev/cove/internal/control/lifecycle"
	"github.com/cove-dev/cove/internal/node"
)

// The API keys the fake knows, and the teams they belong to.
const (
	keyA  = "cove_key_a"
	keyB  = "cove_key_b"
	teamA = "team_a"
	teamB = "team_b"
)

// call is one call the fake received: the method, the team it named, and
// for file calls the whole target.
type call struct {
	Method string
	TeamID string
	Target files.Target
}

// fakeControlPlane is an in-memory ControlPlane. Each method calls its Fn
// field when the test set one; otherwise it answers not_found (an empty
// page for lists, a new sandbox for a create). Every call on a team's resources is recorded with the
// team it named. Tests set the Fn fields before making requests.
type fakeControlPlane struct {
	AuthenticateFn func(ctx context.Context, key string) (lifecycle.Principal, error)
	WarmPoolFn     func() (ready, target int)
	IdempotentlyFn func(ctx context.Context, teamID, key, requestHash string, do func(context.Context) lifecycle.Answer) (lifecycle.Answer, bool, error)

	CreateSandboxFn    func(ctx context.Context, teamID string, req api.CreateSandboxRequest) (api.Sandbox, error)
	GetSandboxFn       func(ctx context.Context, teamID, ref string) (api.Sandbox, error)
	WaitSandboxFn      func(ctx context.Context, teamID, ref string, want api.SandboxState, timeout time.Duration) (api.Sandbox, error)
	ListSandboxesFn    func(ctx context.Context, teamID string, q lifecycle.SandboxQuery) (api.List[api.Sandbox], error)
	UpdateSandboxFn    func(ctx context.Context, teamID, ref string, req api.UpdateSandboxRequest) (api.Sandbox, error)
	TerminateSandboxFn func(ctx context.Context, teamID, ref string) (api.Sandbox, error)
	SleepSandboxFn     func(ctx context.Context, teamID, ref, reason string) (api.Sandbox, error)
	WakeSandboxFn      func(ctx context.Context, teamID, ref string) (api.Sandbox, error)
	NetworkFn          func(ctx context.Context, teamID, ref string) (api.NetworkView, error)

	ExecFn          func(ctx context.Context, teamID, ref string, wake bool, req api.CreateCommandRequest) (api.Command, error)
	GetCommandFn    func(ctx context.Context, teamID, ref, commandID string) (api.Command, error)
	ListCommandsFn  func(ctx context.Context, teamID, ref string, q lifecycle.CommandQuery) (api.List[api.Command], error)
	WaitCommandFn   func(ctx context.Context, teamID, ref, commandID string) (api.CommandResult, error)
	CommandOutputFn func(ctx context.Context, teamID, ref, commandID string) (api.Command, node.Output, error)
	StdinFn         func(ctx context.Context, teamID, ref, commandID string, r io.Reader, eof bool) error
	SignalFn        func(ctx context.Context, teamID, ref, commandID, sig string) error
	ResizeFn        func(ctx context.Context, teamID, ref, commandID string, cols, rows int) error

	StatFileFn     func(ctx context.Context, t files.Target, p string) (api.FileEntry, error)
	ListFilesFn    func(ctx context.Context, t files.Target, q files.ListQuery) (api.List[api.FileEntry], error)
	ReadFileFn     func(ctx context.Context, t files.Target, req node.ReadSpec) (*node.Content, error)
	WriteFileFn    func(ctx context.Context, t files.Target, req files.WriteRequest, body io.Reader) (api.FileEntry, bool, error)
	EditFileFn     func(ctx context.Context, t files.Target, p string, ifMatch []string, req api.EditFileRequest) (api.FileEntry, error)
	MkdirFn        func(ctx context.Context, t files.Target, req api.MkdirRequest, user string) (api.FileEntry, error)
	MoveFileFn     func(ctx context.Context, t files.Target, req api.MoveRequest, user string) (api.FileEntry, error)
	RemoveFileFn   func(ctx context.Context, t files.Target, p string, recursive bool) error
	ReadArchiveFn  func(ctx context.Context, t files.Target, p string) (io.ReadCloser, error)
	WriteArchiveFn func(ctx context.Context, t files.Target, req files.ArchiveUpload, body io.Reader) (api.ArchiveResult, error)
	WatchFilesFn   func(ctx context.Context, t files.Target, q files.WatchQuery) (node.FileWatch, error)

	ListEventsFn func(ctx context.Context, teamID string, q lifecycle.EventQuery) (api.List[api.Event], error)

	CreateTeamFn func(ctx context.Context, p lifecycle.Principal, req api.CreateTeamRequest) (api.CreateTeamResponse, error)
	ListTeamsFn  func(ctx context.Context, p lifecycle.Principal) ([]api.Team, error)
	CreateKeyFn  func(ctx context.Context, p lifecycle.Principal, teamID string) (api.KeyResponse, error)
	RevokeKeyFn  func(ctx context.Context, p lifecycle.Principal, keyID string) error

	secrets fakeSecrets
	fakeMetering

	// changes is never closed: nothing changes unless a test says so.
	changes chan struct{}

	// idemMu is held while an idempotent request runs, as the real
	// control plane holds a per-key lock; it is not mu, which the
	// request's own calls take.
	idemMu  sync.Mutex
	answers map[string]storedAnswer

	mu    sync.Mutex
	calls []call
}

type storedAnswer struct {
	hash   string
	answer lifecycle.Answer
}

func newFake() *fakeControlPlane {
	return &fakeControlPlane{changes: make(chan struct{}), answers: map[string]storedAnswer{}}
}

func (f *fakeControlPlane) record(method, teamID string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, call{Method: method, TeamID: teamID})
}

func (f *fakeControlPlane) recordFile(method string, t files.Target) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, call{Method: method, TeamID: t.TeamID, Target: t})
}

// Calls returns the calls received so far, Authenticate aside.
func (f *fakeControlPlane) Calls() []call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]call(nil), f.calls...)
}

// Last returns the last call of a method, and whether there was one.
func (f *fakeControlPlane) Last(method string) (call, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := len(f.calls) - 1; i >= 0; i-- {
		if f.calls[i].Method == method {
			return f.calls[i], true
		}
	}
	return call{}, false
}

// Count returns how many times a method was called.
func (f *fakeControlPlane) Count(method string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.calls {
		if c.Method == method {
			n++
		}
	}
	return n
}

func notFound(what, ref string) error {
	return api.Errorf(api.CodeNotFound, "%s %q not found", what, ref)
}

func (f *fakeControlPlane) Authenticate(ctx context.Context, key string) (lifecycle.Principal, error) {
	if f.AuthenticateFn != nil {
		return f.AuthenticateFn(ctx, key)
	}
	switch key {
	case keyA:
		return lifecycle.Principal{Team: api.Team{ID: teamA, Name: "a"}, KeyID: "key_a"}, nil
	case keyB:
		return lifecycle.Principal{Team: api.Team{ID: teamB, Name: "b"}, KeyID: "key_b"}, nil
	}
	return lifecycle.Principal{}, api.Errorf(api.CodeUnauthenticated, "the API key is not valid")
}

func (f *fakeControlPlane) Changes() <-chan struct{} { return f.changes }

func (f *fakeControlPlane) WarmPool() (ready, target int) {
	if f.WarmPoolFn != nil {
		return f.WarmPoolFn()
	}
	return 0, 0
}

// Idempotently keeps successful answers in memory, per team and key, the
// way the control plane does: the same request replays, another request
// under the key is refused, a failed answer is not kept.
func (f *fakeControlPlane) Idempotently(ctx context.Context, teamID, key, requestHash string, do func(context.Context) lifecycle.Answer) (lifecycle.Answer, bool, error) {
	f.record("Idempotently", teamID)
	if f.IdempotentlyFn != nil {
		return f.IdempotentlyFn(ctx, teamID, key, requestHash, do)
	}
	f.idemMu.Lock()
	defer f.idemMu.Unlock()
	k := teamID + "\x00" + key
	if prev, ok := f.answers[k]; ok {
		if prev.hash != requestHash {
			return lifecycle.Answer{}, false, api.Errorf(api.CodeUnprocessable, "Idempotency-Key %q was used for another request", key)
		}
		return prev.answer, true, nil
	}
	a := do(ctx)
	if a.Status >= 200 && a.Status < 300 {
		f.answers[k] = storedAnswer{hash: requestHash, answer: a}
	}
	return a, false, nil
}

func (f *fakeControlPlane) CreateSandbox(ctx context.Context, teamID string, req api.CreateSandboxRequest) (api.Sandbox, error) {
	f.record("CreateSandbox", teamID)
	if f.CreateSandboxFn != nil {
		return f.CreateSandboxFn(ctx, teamID, req)
	}
	return api.Sandbox{ID: "sbx_1", Name: req.Name, TeamID: teamID, State: api.StateCreating}, nil
}

func (f *fakeControlPlane) GetSandbox(ctx context.Context, teamID, ref string) (api.Sandbox, error) {
	f.record("GetSandbox", teamID)
	if f.GetSandboxFn != nil {
		return f.GetSandboxFn(ctx, teamID, ref)
	}
	return api.Sandbox{}, notFound("sandbox", ref)
}

func (f *fakeControlPlane) WaitSandbox(ctx context.Context, teamID, ref string, want api.SandboxState, timeout time.Duration) (api.Sandbox, error) {
	f.record("WaitSandbox", teamID)
	if f.WaitSandboxFn != nil {
		return f.WaitSandboxFn(ctx, teamID, ref, want, timeout)
	}
	return api.Sandbox{}, notFound("sandbox", ref)
}

func (f *fakeControlPlane) ListSandboxes(ctx context.Context, teamID string, q lifecycle.SandboxQuery) (api.List[api.Sandbox], error) {
	f.record("ListSandboxes", teamID)
	if f.ListSandboxesFn != nil {
		return f.ListSandboxesFn(ctx, teamID, q)
	}
	return api.List[api.Sandbox]{Items: []api.Sandbox{}}, nil
}

func (f *fakeControlPlane) UpdateSandbox(ctx context.Context, teamID, ref string, req api.UpdateSandboxRequest) (api.Sandbox, error) {
	f.record("UpdateSandbox", teamID)
	if f.UpdateSandboxFn != nil {
		return f.UpdateSandboxFn(ctx, teamID, ref, req)
	}
	return api.Sandbox{}, notFound("sandbox", ref)
}

func (f *fakeControlPlane) TerminateSandbox(ctx context.Context, teamID, ref string) (api.Sandbox, error) {
	f.record("TerminateSandbox", teamID)
	if f.TerminateSandboxFn != nil {
		return f.TerminateSandboxFn(ctx, teamID, ref)
	}
	return api.Sandbox{}, notFound("sandbox", ref)
}

func (f *fakeControlPlane) SleepSandbox(ctx context.Context, teamID, ref, reason string) (api.Sandbox, error) {
	f.record("SleepSandbox", teamID)
	if f.SleepSandboxFn != nil {
		return f.SleepSandboxFn(ctx, teamID, ref, reason)
	}
	return api.Sandbox{}, notFound("sandbox", ref)
}

func (f *fakeControlPlane) WakeSandbox(ctx context.Context, teamID, ref string) (api.Sandbox, error) {
	f.record("WakeSandbox", teamID)
	if f.WakeSandboxFn != nil {
		return f.WakeSandboxFn(ctx, teamID, ref)
	}
	return api.Sandbox{}, notFound("sandbox", ref)
}

func (f *fakeControlPlane) Network(ctx context.Context, teamID, ref string) (api.NetworkView, error) {
	f.record("Network", teamID)
	if f.NetworkFn != nil {
		return f.NetworkFn(ctx, teamID, ref)
	}
	return api.NetworkView{}, notFound("sandbox", ref)
}

func (f *fakeControlPlane) Exec(ctx context.Context, teamID, ref string, wake bool, req api.CreateCommandRequest) (api.Command, error) {
	f.record("Exec", teamID)
	if f.ExecFn != nil {
		return f.ExecFn(ctx, teamID, ref, wake, req)
	}
	return api.Command{}, notFound("sandbox", ref)
}

func (f *fakeControlPlane) GetCommand(ctx context.Context, teamID, ref, commandID string) (api.Command, error) {
	f.record("GetCommand", teamID)
	if f.GetCommandFn != nil {
		return f.GetCommandFn(ctx, teamID, ref, commandID)
	}
	return api.Command{}, notFound("command", commandID)
}

func (f *fakeControlPlane) ListCommands(ctx context.Context, teamID, ref string, q lifecycle.CommandQuery) (api.List[api.Command], error) {
	f.record("ListCommands", teamID)
	if f.ListCommandsFn != nil {
		return f.ListCommandsFn(ctx, teamID, ref, q)
	}
	return api.List[api.Command]{Items: []api.Command{}}, nil
}

func (f *fakeControlPlane) WaitCommand(ctx context.Context, teamID, ref, commandID string) (api.CommandResult, error) {
	f.record("WaitCommand", teamID)
	if f.WaitCommandFn != nil {
		return f.WaitCommandFn(ctx, teamID, ref, commandID)
	}
	return api.CommandResult{}, notFound("command", commandID)
}

func (f *fakeControlPlane) CommandOutput(ctx context.Context, teamID, ref, commandID string) (api.Command, node.Output, error) {
	f.record("CommandOutput", teamID)
	if f.CommandOutputFn != nil {
		return f.CommandOutputFn(ctx, teamID, ref, commandID)
	}
	return api.Command{}, nil, notFound("command", commandID)
}

func (f *fakeControlPlane) Stdin(ctx context.Context, teamID, ref, commandID string, r io.Reader, eof bool) error {
	f.record("Stdin", teamID)
	if f.StdinFn != nil {
		return f.StdinFn(ctx, teamID, ref, commandID, r, eof)
	}
	return notFound("command", commandID)
}

func (f *fakeControlPlane) Signal(ctx context.Context, teamID, ref, commandID, sig string) error {
	f.record("Signal", teamID)
	if f.SignalFn != nil {
		return f.SignalFn(ctx, teamID, ref, commandID, sig)
	}
	return notFound("command", commandID)
}

func (f *fakeControlPlane) Resize(ctx context.Context, teamID, ref, commandID string, cols, rows int) error {
	f.record("Resize", teamID)
	if f.ResizeFn != nil {
		return f.ResizeFn(ctx, teamID, ref, commandID, cols, rows)
	}
	return notFound("command", commandID)
}

func (f *fakeControlPlane) StatFile(ctx context.Context, t files.Target, p string) (api.FileEntry, error) {
	f.recordFile("StatFile", t)
	if f.StatFileFn != nil {
		return f.StatFileFn(ctx, t, p)
	}
	return api.FileEntry{}, notFound("file", p)
}

func (f *fakeControlPlane) ListFiles(ctx context.Context, t files.Target, q files.ListQuery) (api.List[api.FileEntry], error) {
	f.recordFile("ListFiles", t)
	if f.ListFilesFn != nil {
		return f.ListFilesFn(ctx, t, q)
	}
	return api.List[api.FileEntry]{}, notFound("directory", q.Path)
}

func (f *fakeControlPlane) ReadFile(ctx context.Context, t files.Target, req node.ReadSpec) (*node.Content, error) {
	f.recordFile("ReadFile", t)
	if f.ReadFileFn != nil {
		return f.ReadFileFn(ctx, t, req)
	}
	return nil, notFound("file", req.Path)
}

func (f *fakeControlPlane) WriteFile(ctx context.Context, t files.Target, req files.WriteRequest, body io.Reader) (api.FileEntry, bool, error) {
	f.recordFile("WriteFile", t)
	if f.WriteFileFn != nil {
		return f.WriteFileFn(ctx, t, req, body)
	}
	return api.FileEntry{}, false, notFound("sandbox", t.Ref)
}

func (f *fakeControlPlane) EditFile(ctx context.Context, t files.Target, p string, ifMatch []string, req api.EditFileRequest) (api.FileEntry, error) {
	f.recordFile("EditFile", t)
	if f.EditFileFn != nil {
		return f.EditFileFn(ctx, t, p, ifMatch, req)
	}
	return api.FileEntry{}, notFound("file", p)
}

func (f *fakeControlPlane) Mkdir(ctx context.Context, t files.Target, req api.MkdirRequest, user string) (api.FileEntry, error) {
	f.recordFile("Mkdir", t)
	if f.MkdirFn != nil {
		return f.MkdirFn(ctx, t, req, user)
	}
	return api.FileEntry{}, notFound("sandbox", t.Ref)
}

func (f *fakeControlPlane) MoveFile(ctx context.Context, t files.Target, req api.MoveRequest, user string) (api.FileEntry, error) {
	f.recordFile("MoveFile", t)
	if f.MoveFileFn != nil {
		return f.MoveFileFn(ctx, t, req, user)
	}
	return api.FileEntry{}, notFound("file", req.From)
}

func (f *fakeControlPlane) RemoveFile(ctx context.Context, t files.Target, p string, recursive bool) error {
	f.recordFile("RemoveFile", t)
	if f.RemoveFileFn != nil {
		return f.RemoveFileFn(ctx, t, p, recursive)
	}
	return notFound("file", p)
}

func (f *fakeControlPlane) ReadArchive(ctx context.Context, t files.Target, p string) (io.ReadCloser, error) {
	f.recordFile("ReadArchive", t)
	if f.ReadArchiveFn != nil {
		return f.ReadArchiveFn(ctx, t, p)
	}
	return nil, notFound("directory", p)
}

func (f *fakeControlPlane) WriteArchive(ctx context.Context, t files.Target, req files.ArchiveUpload, body io.Reader) (api.ArchiveResult, error) {
	f.recordFile("WriteArchive", t)
	if f.WriteArchiveFn != nil {
		return f.WriteArchiveFn(ctx, t, req, body)
	}
	return api.ArchiveResult{}, notFound("sandbox", t.Ref)
}

func (f *fakeControlPlane) WatchFiles(ctx context.Context, t files.Target, q files.WatchQuery) (node.FileWatch, error) {
	f.recordFile("WatchFiles", t)
	if f.WatchFilesFn != nil {
		return f.WatchFilesFn(ctx, t, q)
	}
	return nil, notFound("directory", q.Path)
}

func (f *fakeControlPlane) ListEvents(ctx context.Context, teamID string, q lifecycle.EventQuery) (api.List[api.Event], error) {
	f.record("ListEvents", teamID)
	if f.ListEventsFn != nil {
		return f.ListEventsFn(ctx, teamID, q)
	}
	return api.List[api.Event]{Items: []api.Event{}}, nil
}

func (f *fakeControlPlane) CreateTeam(ctx context.Context, p lifecycle.Principal, req api.CreateTeamRequest) (api.CreateTeamResponse, error) {
	f.record("CreateTeam", p.Team.ID)
	if f.CreateTeamFn != nil {
		return f.CreateTeamFn(ctx, p, req)
	}
	return api.CreateTeamResponse{}, api.Errorf(api.CodePermissionDenied, "only the admin team manages teams")
}

func (f *fakeControlPlane) ListTeams(ctx context.Context, p lifecycle.Principal) ([]api.Team, error) {
	f.record("ListTeams", p.Team.ID)
	if f.ListTeamsFn != nil {
		return f.ListTeamsFn(ctx, p)
	}
	return []api.Team{p.Team}, nil
}

func (f *fakeControlPlane) CreateKey(ctx context.Context, p lifecycle.Principal, teamID string, _ api.CreateKeyRequest) (api.KeyResponse, error) {
	f.record("CreateKey", p.Team.ID)
	if f.CreateKeyFn != nil {
		return f.CreateKeyFn(ctx, p, teamID)
	}
	return api.KeyResponse{}, notFound("team", teamID)
}

func (f *fakeControlPlane) RevokeKey(ctx context.Context, p lifecycle.Principal, keyID string) error {
	f.record("RevokeKey", p.Team.ID)
	if f.RevokeKeyFn != nil {
		return f.RevokeKeyFn(ctx, p, keyID)
	}
	return notFound("key", keyID)
}

// memOutput is an in-memory node.Output. Like the node's recorder, every
// chunk and the exit take the next sequence number.
type memOutput struct {
	mu      sync.Mutex
	chunks  []node.Chunk
	streams map[string]*bytes.Buffer
	lastSeq int64
	exit    *node.Exit
	changed chan struct{}
}

var _ node.Output = (*memOutput)(nil)

// Close releases nothing: the fake holds no files.
func (o *memOutput) Close() error { return nil }

func newOutput() *memOutput {
	return &memOutput{
		streams: map[string]*bytes.Buffer{"stdout": {}, "stderr": {}},
		changed: make(chan struct{}),
	}
}

func (o *memOutput) notify() {
	close(o.changed)
	o.changed = make(chan struct{})
}

// add records data on a stream ("stdout" or "stderr").
func (o *memOutput) add(stream, data string) *memOutput {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.lastSeq++
	o.chunks = append(o.chunks, node.Chunk{Seq: o.lastSeq, Stream: stream, Data: []byte(data)})
	o.streams[stream].WriteString(data)
	o.notify()
	return o
}

// truncate records the marker where recording stopped at its cap.
func (o *memOutput) truncate() *memOutput {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.lastSeq++
	o.chunks = append(o.chunks, node.Chunk{Seq: o.lastSeq, Truncated: true})
	o.notify()
	return o
}

// end records the exit.
func (o *memOutput) end(e node.Exit) *memOutput {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.lastSeq++
	o.exit = &e
	o.notify()
	return o
}

func (o *memOutput) Read(ctx context.Context, after int64, follow bool, fn func(node.Chunk) error) (*node.Exit, error) {
	for {
		o.mu.Lock()
		var todo []node.Chunk
		for _, c := range o.chunks {
			if c.Seq > after {
				todo = append(todo, c)
			}
		}
		exit, changed := o.exit, o.changed
		o.mu.Unlock()
		for _, c := range todo {
			if err := fn(c); err != nil {
				return nil, err
			}
			after = c.Seq
		}
		if exit != nil {
			return exit, nil
		}
		if !follow {
			return nil, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (o *memOutput) Stream(name string) (io.ReaderAt, int64, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	b, ok := o.streams[name]
	if !ok {
		return nil, 0, fmt.Errorf("unknown stream %q", name)
	}
	data := bytes.Clone(b.Bytes())
	return bytes.NewReader(data), int64(len(data)), nil
}

func (o *memOutput) LastSeq() int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.lastSeq
}

func (o *memOutput) Sizes() (stdout, stderr int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return int64(o.streams["stdout"].Len()), int64(o.streams["stderr"].Len())
}

func (o *memOutput) Exit() *node.Exit {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.exit
}

func (o *memOutput) Ended() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.exit != nil
}

func (o *memOutput) Changed() <-chan struct{} {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.changed
}

var (
	_ Files  = (*fakeControlPlane)(nil)
	_ Assets = (*fakeControlPlane)(nil)
)

// Assets: the fake has none unless a test sets AssetFn.
func (f *fakeControlPlane) CreateAsset(ctx context.Context, teamID string, req assets.Upload, body io.Reader) (api.Asset, bool, error) {
	f.record("CreateAsset", teamID)
	return api.Asset{}, false, api.Errorf(api.CodeUnprocessable, "the fake has no assets")
}

func (f *fakeControlPlane) GetAsset(ctx context.Context, teamID, assetID string) (api.Asset, error) {
	f.record("GetAsset", teamID)
	return api.Asset{}, api.Errorf(api.CodeNotFound, "asset %s not found", assetID)
}

func (f *fakeControlPlane) ListAssets(ctx context.Context, teamID, cursor string, limit int) (api.List[api.Asset], error) {
	f.record("ListAssets", teamID)
	return api.List[api.Asset]{Items: []api.Asset{}}, nil
}

func (f *fakeControlPlane) OpenAsset(ctx context.Context, teamID, assetID string) (api.Asset, io.ReadCloser, error) {
	f.record("OpenAsset", teamID)
	return api.Asset{}, nil, api.Errorf(api.CodeNotFound, "asset %s not found", assetID)
}

func (f *fakeControlPlane) DeleteAsset(ctx context.Context, teamID, assetID string) error {
	f.record("DeleteAsset", teamID)
	return api.Errorf(api.CodeNotFound, "asset %s not found", assetID)
}

func (f *fakeControlPlane) SaveAsset(ctx context.Context, teamID, ref string, req api.SaveAssetRequest) (api.Asset, bool, error) {
	f.record("SaveAsset", teamID)
	return api.Asset{}, false, api.Errorf(api.CodeNotFound, "sandbox %s not found", ref)
}
