package e2b

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/commands"
	"github.com/cove-dev/cove/internal/e2b/envd/process"
	"github.com/cove-dev/cove/internal/e2b/envd/process/processconnect"
	"github.com/cove-dev/cove/internal/node"
)

// Commands are a sandbox's commands' calls the process service makes
// (commands.Service).
type Commands interface {
	Exec(ctx context.Context, teamID, ref string, wake bool, req api.CreateCommandRequest) (api.Command, error)
	GetCommand(ctx context.Context, teamID, ref, commandID string) (api.Command, error)
	ListCommands(ctx context.Context, teamID, ref string, q commands.Query) (api.List[api.Command], error)
	CommandOutput(ctx context.Context, teamID, ref, commandID string) (api.Command, node.Output, error)
	Stdin(ctx context.Context, teamID, ref, commandID string, r io.Reader, eof bool) error
	Signal(ctx context.Context, teamID, ref, commandID, sig string) error
	Resize(ctx context.Context, teamID, ref, commandID string, cols, rows int) error
}

var _ Commands = (*commands.Service)(nil)

// processes serves envd's process.Process over cove's commands.
type processes struct {
	processconnect.UnimplementedProcessHandler
	sandboxes Sandboxes
	cmds      Commands
	log       *slog.Logger
	// keepalive is how often a quiet stream gets a keepalive event.
	keepalive time.Duration
}

// userOf is the user a request acts as: envd takes it from Basic auth
// (the name, no password); the default is user.
func userOf(h http.Header) (string, error) {
	scheme, cred, ok := strings.Cut(h.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Basic") {
		return "user", nil
	}
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(cred))
	if err != nil {
		return "", connect.NewError(connect.CodeInvalidArgument, errors.New("Authorization: Basic credentials are not base64"))
	}
	name, _, _ := strings.Cut(string(b), ":")
	switch name {
	case "", "user":
		return "user", nil
	case "root":
		return "root", nil
	}
	return "", connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("user %q is unknown; cove's sandboxes have user and root", name))
}

// rpcError is err as a Connect error: one table, from cove's codes.
func rpcError(err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return err
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return connect.NewError(connect.CodeDeadlineExceeded, err)
	}
	if errors.Is(err, context.Canceled) {
		return connect.NewError(connect.CodeCanceled, err)
	}
	var e *api.Error
	if !errors.As(err, &e) {
		return connect.NewError(connect.CodeInternal, errors.New("internal error"))
	}
	code := map[api.Code]connect.Code{
		api.CodeInvalidArgument:    connect.CodeInvalidArgument,
		api.CodeUnauthenticated:    connect.CodeUnauthenticated,
		api.CodePermissionDenied:   connect.CodePermissionDenied,
		api.CodeNotFound:           connect.CodeNotFound,
		api.CodeConflict:           connect.CodeFailedPrecondition,
		api.CodePreconditionFailed: connect.CodeFailedPrecondition,
		api.CodePayloadTooLarge:    connect.CodeResourceExhausted,
		api.CodeResourceExhausted:  connect.CodeResourceExhausted,
		api.CodeBudgetExceeded:     connect.CodeResourceExhausted,
		// A full disk, the sandbox's or the node's: E2B's envd answers
		// resource_exhausted for ENOSPC too.
		api.CodeInsufficientStorage: connect.CodeResourceExhausted,
		api.CodeUnavailable:         connect.CodeUnavailable,
	}[e.Code]
	if code == 0 {
		code = connect.CodeInternal
	}
	return connect.NewError(code, errors.New(e.Message))
}

// running lists the sandbox's running commands, oldest first.
func (p *processes) running(ctx context.Context, t target) ([]api.Command, error) {
	var out []api.Command
	q := commands.Query{States: []api.CommandState{api.CommandRunning}}
	q.Limit = 1000
	for {
		l, err := p.cmds.ListCommands(ctx, t.TeamID, t.SandboxID, q)
		if err != nil {
			return nil, err
		}
		out = append(out, l.Items...)
		if l.NextCursor == "" {
			return out, nil
		}
		q.Cursor = l.NextCursor
	}
}

// command is the running command of the sandbox a selector names, by
// pid or tag. Its pid is the sandbox's own (api.Command.PID), so the pid
// of a command that ended names nothing, as a pid of a process that is
// gone does in envd; should the sandbox have given it to another command
// since, that one is found. A tag is the command's (api.Command.Tag),
// as its start sent it; of two running commands with the same tag, the
// newer is found.
func (p *processes) command(ctx context.Context, t target, sel *process.ProcessSelector) (api.Command, error) {
	if sel == nil {
		return api.Command{}, connect.NewError(connect.CodeInvalidArgument, errors.New("process selector is required"))
	}
	match := func(c api.Command) bool { return sel.GetPid() != 0 && c.PID == int(sel.GetPid()) }
	what := fmt.Sprintf("pid %d", sel.GetPid())
	if _, ok := sel.GetSelector().(*process.ProcessSelector_Tag); ok {
		match = func(c api.Command) bool { return sel.GetTag() != "" && c.Tag == sel.GetTag() }
		what = fmt.Sprintf("tag %q", sel.GetTag())
	}
	cmds, err := p.running(ctx, t)
	if err != nil {
		return api.Command{}, err
	}
	for i := len(cmds) - 1; i >= 0; i-- {
		if match(cmds[i]) {
			return cmds[i], nil
		}
	}
	return api.Command{}, connect.NewError(connect.CodeNotFound, fmt.Errorf("process with %s not found", what))
}

func (p *processes) Start(ctx context.Context, req *connect.Request[process.StartRequest], stream *connect.ServerStream[process.StartResponse]) error {
	t := targetOf(ctx)
	user, err := userOf(req.Header())
	if err != nil {
		return err
	}
	cfg := req.Msg.GetProcess()
	if cfg.GetCmd() == "" {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("process.cmd is required"))
	}
	creq := api.CreateCommandRequest{
		Argv: append([]string{cfg.GetCmd()}, cfg.GetArgs()...), Cwd: homeOf(user), Env: cfg.GetEnvs(),
		Stdin: req.Msg.GetStdin(), User: user, Tag: req.Msg.GetTag(),
	}
	if cfg.Cwd != nil {
		creq.Cwd = absPath(user, cfg.GetCwd())
	}
	if req.Msg.Pty != nil {
		size := req.Msg.GetPty().GetSize()
		creq.PTY = &api.PTY{Cols: int(size.GetCols()), Rows: int(size.GetRows())}
	}
	// The stream's deadline kills the process (below); cove's own timeout,
	// a little later, kills it too should this listener be gone by then.
	if dl, ok := ctx.Deadline(); ok {
		s := int64(math.Ceil(time.Until(dl).Seconds())) + 1
		creq.TimeoutS = &s
	}
	// The process outlives this request: closing the stream leaves it
	// running. A paused sandbox is not woken (wake false), as by a file
	// call: E2B's paused sandbox is not reachable until connected.
	c, err := p.cmds.Exec(context.WithoutCancel(ctx), t.TeamID, t.SandboxID, false, creq)
	if err != nil {
		return rpcError(err)
	}
	send := func(ev *process.ProcessEvent) error { return stream.Send(&process.StartResponse{Event: ev}) }
	if err := send(&process.ProcessEvent{Event: &process.ProcessEvent_Start{Start: &process.ProcessEvent_StartEvent{Pid: uint32(c.PID)}}}); err != nil {
		return err
	}
	return p.follow(ctx, t, c, 0, send)
}

func (p *processes) Connect(ctx context.Context, req *connect.Request[process.ConnectRequest], stream *connect.ServerStream[process.ConnectResponse]) error {
	t := targetOf(ctx)
	c, err := p.command(ctx, t, req.Msg.GetProcess())
	if err != nil {
		return rpcError(err)
	}
	send := func(ev *process.ProcessEvent) error { return stream.Send(&process.ConnectResponse{Event: ev}) }
	if err := send(&process.ProcessEvent{Event: &process.ProcessEvent_Start{Start: &process.ProcessEvent_StartEvent{Pid: uint32(c.PID)}}}); err != nil {
		return err
	}
	// A connection sees what the process writes from now on, as envd's.
	return p.follow(ctx, t, c, -1, send)
}

// follow streams a command's output after seq after (-1: from what comes
// next) and its end, with keepalives while it is quiet. At the stream's
// deadline the process is killed and the stream ends with
// deadline_exceeded; a stream the client closes leaves it running.
func (p *processes) follow(ctx context.Context, t target, c api.Command, after int64, send func(*process.ProcessEvent) error) error {
	_, out, err := p.cmds.CommandOutput(ctx, t.TeamID, t.SandboxID, c.ID)
	if err != nil {
		return rpcError(err)
	}
	defer out.Close()
	if after < 0 {
		after = out.LastSeq()
	}
	// Sends come from the reader and the keepalive ticker: one at a time.
	var mu sync.Mutex
	locked := func(ev *process.ProcessEvent) error {
		mu.Lock()
		defer mu.Unlock()
		return send(ev)
	}
	rctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(p.keepalive)
		defer tick.Stop()
		for {
			select {
			case <-rctx.Done():
				return
			case <-tick.C:
				if locked(&process.ProcessEvent{Event: &process.ProcessEvent_Keepalive{Keepalive: &process.ProcessEvent_KeepAlive{}}}) != nil {
					stop()
					return
				}
			}
		}
	})
	exit, err := out.Read(rctx, after, true, func(ch node.Chunk) error {
		if len(ch.Data) == 0 {
			return nil
		}
		data := &process.ProcessEvent_DataEvent{}
		switch {
		case c.PTY != nil:
			data.Output = &process.ProcessEvent_DataEvent_Pty{Pty: ch.Data}
		case ch.Stream == "stderr":
			data.Output = &process.ProcessEvent_DataEvent_Stderr{Stderr: ch.Data}
		default:
			data.Output = &process.ProcessEvent_DataEvent_Stdout{Stdout: ch.Data}
		}
		return locked(&process.ProcessEvent{Event: &process.ProcessEvent_Data{Data: data}})
	})
	stop()
	wg.Wait()
	if ctx.Err() != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			// The deadline is the process's: it dies with the stream.
			kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			if err := p.cmds.Signal(kctx, t.TeamID, t.SandboxID, c.ID, "KILL"); err != nil && api.ErrorCode(err) != api.CodeConflict {
				p.log.Warn("kill a process at its stream's deadline", "sandbox", t.SandboxID, "command", c.ID, "err", err)
			}
		}
		return rpcError(ctx.Err())
	}
	if err != nil || exit == nil {
		// The command was lost with its sandbox (killed, gone to sleep):
		// the connection is cut mid-body, as envd's is when its sandbox
		// goes, and the SDK asks /health why.
		if sb, gerr := p.sandboxes.GetSandbox(ctx, t.TeamID, t.SandboxID); gerr != nil || sb.State != api.StateRunning {
			panic(http.ErrAbortHandler)
		}
		if err == nil {
			err = fmt.Errorf("the output of command %s ended without an exit", c.ID)
		}
		if ae := (*api.Error)(nil); !errors.As(err, &ae) {
			p.log.Error("follow a process", "sandbox", t.SandboxID, "command", c.ID, "err", err)
		}
		return rpcError(err)
	}
	return locked(&process.ProcessEvent{Event: &process.ProcessEvent_End{End: endEvent(*exit)}})
}

// endEvent is envd's end of a process: the status reads as Go's
// os.ProcessState says it.
func endEvent(e node.Exit) *process.ProcessEvent_EndEvent {
	end := &process.ProcessEvent_EndEvent{ExitCode: int32(e.ExitCode), Exited: e.Signal == ""}
	switch {
	case e.Signal != "":
		end.Status = "signal: " + signalName(e.Signal)
	default:
		end.Status = "exit status " + strconv.Itoa(e.ExitCode)
	}
	if e.ExitCode != 0 && e.Signal == "" {
		msg := end.Status
		end.Error = &msg
	}
	return end
}

// signalName is a signal as Go's os.ProcessState names it.
func signalName(sig string) string {
	switch strings.TrimPrefix(sig, "SIG") {
	case "KILL":
		return "killed"
	case "TERM":
		return "terminated"
	case "INT":
		return "interrupt"
	case "HUP":
		return "hangup"
	}
	return strings.ToLower(sig)
}

func (p *processes) List(ctx context.Context, req *connect.Request[process.ListRequest]) (*connect.Response[process.ListResponse], error) {
	t := targetOf(ctx)
	cmds, err := p.running(ctx, t)
	if err != nil {
		return nil, rpcError(err)
	}
	resp := &process.ListResponse{Processes: []*process.ProcessInfo{}}
	for _, c := range cmds {
		cfg := &process.ProcessConfig{Envs: c.Env}
		if len(c.Argv) > 0 {
			cfg.Cmd, cfg.Args = c.Argv[0], c.Argv[1:]
		} else {
			cfg.Cmd, cfg.Args = "/bin/sh", []string{"-c", c.Command}
		}
		cwd := c.Cwd
		cfg.Cwd = &cwd
		info := &process.ProcessInfo{Config: cfg, Pid: uint32(c.PID)}
		if c.Tag != "" {
			info.Tag = &c.Tag
		}
		resp.Processes = append(resp.Processes, info)
	}
	return connect.NewResponse(resp), nil
}

func (p *processes) SendInput(ctx context.Context, req *connect.Request[process.SendInputRequest]) (*connect.Response[process.SendInputResponse], error) {
	t := targetOf(ctx)
	c, err := p.command(ctx, t, req.Msg.GetProcess())
	if err != nil {
		return nil, rpcError(err)
	}
	in := req.Msg.GetInput()
	data := in.GetStdin()
	if _, ok := in.GetInput().(*process.ProcessInput_Pty); ok {
		data = in.GetPty()
	}
	if err := p.cmds.Stdin(ctx, t.TeamID, t.SandboxID, c.ID, bytes.NewReader(data), false); err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&process.SendInputResponse{}), nil
}

func (p *processes) CloseStdin(ctx context.Context, req *connect.Request[process.CloseStdinRequest]) (*connect.Response[process.CloseStdinResponse], error) {
	t := targetOf(ctx)
	c, err := p.command(ctx, t, req.Msg.GetProcess())
	if err != nil {
		return nil, rpcError(err)
	}
	if err := p.cmds.Stdin(ctx, t.TeamID, t.SandboxID, c.ID, bytes.NewReader(nil), true); err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&process.CloseStdinResponse{}), nil
}

func (p *processes) SendSignal(ctx context.Context, req *connect.Request[process.SendSignalRequest]) (*connect.Response[process.SendSignalResponse], error) {
	t := targetOf(ctx)
	c, err := p.command(ctx, t, req.Msg.GetProcess())
	if err != nil {
		return nil, rpcError(err)
	}
	var sig string
	switch req.Msg.GetSignal() {
	case process.Signal_SIGNAL_SIGKILL:
		sig = "KILL"
	case process.Signal_SIGNAL_SIGTERM:
		sig = "TERM"
	default:
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("signal must be SIGKILL or SIGTERM"))
	}
	if err := p.cmds.Signal(ctx, t.TeamID, t.SandboxID, c.ID, sig); err != nil {
		if api.ErrorCode(err) == api.CodeConflict {
			// It has ended: envd's process is gone, so it is not found.
			return nil, connect.NewError(connect.CodeNotFound, errors.New(err.Error()))
		}
		return nil, rpcError(err)
	}
	return connect.NewResponse(&process.SendSignalResponse{}), nil
}

func (p *processes) Update(ctx context.Context, req *connect.Request[process.UpdateRequest]) (*connect.Response[process.UpdateResponse], error) {
	t := targetOf(ctx)
	c, err := p.command(ctx, t, req.Msg.GetProcess())
	if err != nil {
		return nil, rpcError(err)
	}
	if size := req.Msg.GetPty().GetSize(); size != nil {
		if err := p.cmds.Resize(ctx, t.TeamID, t.SandboxID, c.ID, int(size.GetCols()), int(size.GetRows())); err != nil {
			return nil, rpcError(err)
		}
	}
	return connect.NewResponse(&process.UpdateResponse{}), nil
}
