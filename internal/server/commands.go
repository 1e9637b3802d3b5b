package server

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/id"
	"github.com/cove-dev/cove/internal/node"
	"github.com/cove-dev/cove/internal/store"
)

const maxTimeoutS = 7 * 24 * 3600

// Exec starts a command in a running sandbox. It returns once the command
// runs; its output is recorded on the node whether or not anyone reads it.
func (s *Server) Exec(ctx context.Context, teamID, ref string, req api.CreateCommandRequest) (api.Command, error) {
	sb, err := s.activeSandbox(ctx, teamID, ref)
	if err != nil {
		return api.Command{}, err
	}
	if !sb.State.Terminal() {
		if err := s.budgetRefusal(ctx, sb); err != nil {
			return api.Command{}, err
		}
	}
	if sb.State != api.StateRunning {
		return api.Command{}, api.Errorf(api.CodeConflict, "sandbox %s is %s; commands run only in a running sandbox", sb.ID, sb.State)
	}
	return s.execIn(ctx, sb, req)
}

// execIn starts a command in a sandbox whose state the caller checked.
func (s *Server) execIn(ctx context.Context, sb api.Sandbox, req api.CreateCommandRequest) (api.Command, error) {
	start := time.Now()
	teamID := sb.TeamID
	cmd, spec, err := s.newCommand(sb, req)
	if err != nil {
		return api.Command{}, err
	}
	if err := s.execSecrets(ctx, sb, req, &cmd, &spec); err != nil {
		return api.Command{}, err
	}
	if err := s.store.CreateCommand(ctx, cmd); err != nil {
		return api.Command{}, err
	}
	unlock := s.cmdLocks.Lock(cmd.ID)
	defer unlock()
	if err := s.node.Exec(ctx, sb.ID, spec); err != nil {
		// Nothing ran: the command must not linger as running.
		if derr := s.store.DeleteCommand(context.WithoutCancel(ctx), sb.ID, cmd.ID); derr != nil {
			s.log.Error("remove command that did not start", "command", cmd.ID, "err", derr)
		}
		return api.Command{}, err
	}
	s.log.Info("command started", "sandbox", sb.ID, "command", cmd.ID)
	s.telemetry.Exec(time.Since(start))
	s.emit(ctx, teamID, "command.started", sb.ID, cmd.ID, map[string]any{"argv": req.Argv, "command": req.Command})
	s.watchSilence(teamID, cmd)
	return cmd, nil
}

func (s *Server) newCommand(sb api.Sandbox, req api.CreateCommandRequest) (api.Command, node.ExecSpec, error) {
	fail := func(err error) (api.Command, node.ExecSpec, error) {
		return api.Command{}, node.ExecSpec{}, err
	}
	switch {
	case req.Command != "" && len(req.Argv) > 0:
		return fail(invalid("give either command or argv, not both"))
	case req.Command != "":
		if len(req.Command) > maxCommandSize || strings.ContainsRune(req.Command, 0) {
			return fail(invalid("command must be at most %d bytes without NUL", maxCommandSize))
		}
	case len(req.Argv) > 0:
		if len(req.Argv) > maxArgv {
			return fail(invalid("argv has %d items; at most %d are allowed", len(req.Argv), maxArgv))
		}
		total := 0
		for _, a := range req.Argv {
			if strings.ContainsRune(a, 0) {
				return fail(invalid("argv contains a NUL byte"))
			}
			total += len(a)
		}
		if total > maxCommandSize {
			return fail(invalid("argv is longer than %d bytes", maxCommandSize))
		}
		if req.Argv[0] == "" {
			return fail(invalid("argv[0] is empty; name the program to run"))
		}
	default:
		return fail(invalid("give command (a shell string) or argv (a list)"))
	}
	cwd := sb.Workdir
	if req.Cwd != "" {
		var err error
		if cwd, err = validatePath("cwd", req.Cwd); err != nil {
			return fail(err)
		}
	}
	if err := validateEnv("env", req.Env); err != nil {
		return fail(err)
	}
	user := req.User
	if user == "" {
		user = "user"
	}
	u, ok := node.Users[user]
	if !ok {
		return fail(invalid("user %q is unknown; use user or root", user))
	}
	var timeout int64
	if req.TimeoutS != nil {
		timeout = *req.TimeoutS
		if timeout < 0 || timeout > maxTimeoutS {
			return fail(rangeError("timeout_s", fmt.Sprint(timeout), "0", fmt.Sprint(maxTimeoutS)))
		}
	}
	var noOutput int64
	if req.NoOutputAlertS != nil {
		if noOutput = *req.NoOutputAlertS; noOutput < 0 {
			return fail(invalid("no_output_alert_s is negative"))
		}
	}
	var size *node.TermSize
	if req.PTY != nil {
		if req.PTY.Cols <= 0 || req.PTY.Rows <= 0 || req.PTY.Cols > 1000 || req.PTY.Rows > 1000 {
			return fail(invalid("pty cols and rows must be between 1 and 1000"))
		}
		size = &node.TermSize{Cols: req.PTY.Cols, Rows: req.PTY.Rows}
		req.Stdin = true // a terminal always takes input
	}

	env := map[string]string{
		"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME": u.Home, "USER": user, "LOGNAME": user, "LANG": "C.UTF-8",
		"COVE_SANDBOX_ID": sb.ID,
	}
	if size != nil {
		env["TERM"] = "xterm-256color"
	}
	if img, ok := s.image(sb.TeamID, sb.Template); ok {
		var err error
		if u, env, err = imageCommand(img, req, user, u, env); err != nil {
			return fail(err)
		}
	}
	for k, v := range sb.Env {
		env[k] = v
	}
	for k, v := range req.Env {
		env[k] = v
	}

	cmd := api.Command{
		ID: id.New("cmd"), SandboxID: sb.ID, Command: req.Command, Argv: req.Argv,
		Cwd: cwd, Env: req.Env, User: user, TimeoutS: timeout, Stdin: req.Stdin,
		PTY: req.PTY, NoOutputAlertS: noOutput, State: api.CommandRunning, StartedAt: s.now(),
	}
	spec := node.ExecSpec{
		ID: cmd.ID, Template: s.nodeTemplate(sb.TeamID, sb.Template), Shell: req.Command, Argv: req.Argv,
		Cwd: cwd, Env: env, UID: u.UID, GID: u.GID,
		Stdin: req.Stdin, Timeout: time.Duration(timeout) * time.Second, PTY: size,
	}
	return cmd, spec, nil
}

// OnExit takes the node's report of a command's end and hands it to the
// receiver registered for its run (a workload, a self-test), or records
// it as a sandbox's command's. The node calls it.
func (s *Server) OnExit(runID, commandID string, e node.Exit, lost bool) {
	s.exits.Deliver(runID, commandID, e, lost)
}

// commandExited records how a sandbox's command ended: the receiver of
// every run that registered none.
func (s *Server) commandExited(sandboxID, commandID string, e node.Exit, lost bool) {
	unlock := s.cmdLocks.Lock(commandID)
	defer unlock()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(s.ctx), 30*time.Second)
	defer cancel()
	c, err := s.store.GetCommand(ctx, sandboxID, commandID)
	if err != nil {
		s.log.Error("command exit for unknown command", "sandbox", sandboxID, "command", commandID, "err", err)
		return
	}
	if c.State.Done() {
		return
	}
	s.applyExit(&c, e, lost)
	s.touchAt(sandboxID, *c.EndedAt)
	s.readSizes(&c)
	if err := s.store.UpdateCommand(ctx, c); err != nil {
		s.log.Error("persist command exit", "command", commandID, "err", err)
		return
	}
	s.log.Info("command ended", "sandbox", sandboxID, "command", commandID, "state", c.State, "exit_code", e.ExitCode)
	if sb, err := s.store.GetSandbox(ctx, "", sandboxID); err == nil {
		s.emit(ctx, sb.TeamID, "command.exited", sandboxID, commandID, map[string]any{
			"state": c.State, "exit_code": c.ExitCode, "signal": c.Signal, "timed_out": c.TimedOut,
		})
	}
	s.exited()
}

func (s *Server) applyExit(c *api.Command, e node.Exit, lost bool) {
	t := s.now()
	c.EndedAt = &t
	c.Signal, c.TimedOut = e.Signal, e.TimedOut
	switch {
	case lost:
		c.State = api.CommandLost
	case e.TimedOut:
		c.State = api.CommandTimedOut
	case e.Signal != "":
		c.State = api.CommandKilled
	default:
		c.State = api.CommandExited
	}
	if !lost && e.Signal == "" {
		code := e.ExitCode
		c.ExitCode = &code
	}
}

// GetCommand returns a command of a sandbox of the team.
func (s *Server) GetCommand(ctx context.Context, teamID, ref, commandID string) (api.Command, error) {
	sb, err := s.activeSandbox(ctx, teamID, ref)
	if err != nil {
		return api.Command{}, err
	}
	if !id.HasPrefix(commandID, "cmd") {
		return api.Command{}, api.Errorf(api.CodeNotFound, "command %q not found", commandID)
	}
	c, err := s.store.GetCommand(ctx, sb.ID, commandID)
	if err != nil {
		return c, err
	}
	if c.State == api.CommandRunning {
		// Sizes grow while it runs, and the log has the exit before the
		// store does: answer from the log, as a reader of the output
		// sees it.
		l, err := s.node.Output(c.SandboxID, c.ID)
		if err == nil {
			c.StdoutBytes, c.StderrBytes = l.Sizes()
			if e := l.Exit(); e != nil {
				s.applyExit(&c, *e, false)
			}
			l.Close()
		}
	}
	return c, nil
}

// CommandQuery selects a page of a sandbox's commands, oldest first.
type CommandQuery struct {
	States []api.CommandState
	Page
}

// ListCommands lists a page of a sandbox's commands.
func (s *Server) ListCommands(ctx context.Context, teamID, ref string, q CommandQuery) (api.List[api.Command], error) {
	limit, err := q.Size()
	if err != nil {
		return api.List[api.Command]{}, err
	}
	sb, err := s.activeSandbox(ctx, teamID, ref)
	if err != nil {
		return api.List[api.Command]{}, err
	}
	items, err := s.store.ListCommands(ctx, store.CommandFilter{SandboxID: sb.ID, States: q.States, After: q.Cursor, Limit: limit + 1})
	if err != nil {
		return api.List[api.Command]{}, err
	}
	return cut(items, limit, func(c api.Command) string { return c.ID }), nil
}

// WaitCommand waits for a command to end and returns it with its output,
// each stream cut at the configured maximum.
func (s *Server) WaitCommand(ctx context.Context, teamID, ref, commandID string) (api.CommandResult, error) {
	c, err := s.GetCommand(ctx, teamID, ref, commandID)
	if err != nil {
		return api.CommandResult{}, err
	}
	l, err := s.node.Output(c.SandboxID, c.ID)
	if err != nil {
		return api.CommandResult{}, err
	}
	defer l.Close()
	var out, errb bytes.Buffer
	truncated := false
	limit := s.cfg.WaitOutputMax
	exit, err := l.Read(ctx, 0, true, func(ch node.Chunk) error {
		b := &out
		if ch.Stream == "stderr" {
			b = &errb
		}
		if ch.Truncated {
			truncated = true
			return nil
		}
		room := limit - int64(b.Len())
		if int64(len(ch.Data)) > room {
			truncated = true
			b.Write(ch.Data[:max(room, 0)])
			return nil
		}
		b.Write(ch.Data)
		return nil
	})
	if err != nil {
		// The sandbox went away under the command (its log is closed):
		// answer with the command as the store now has it, lost.
		if ctx.Err() != nil {
			return api.CommandResult{}, err
		}
		cur, gerr := s.store.GetCommand(ctx, c.SandboxID, c.ID)
		if gerr != nil || !cur.State.Done() {
			return api.CommandResult{}, err
		}
	}
	// The recorder reports the exit to the store right after the log has it;
	// answer from the log so the caller never sees "running" here.
	if c, err = s.store.GetCommand(ctx, c.SandboxID, c.ID); err != nil {
		return api.CommandResult{}, err
	}
	if !c.State.Done() && exit != nil {
		s.applyExit(&c, *exit, false)
	}
	c.StdoutBytes, c.StderrBytes = l.Sizes()
	return api.CommandResult{
		Command: c, Stdout: validUTF8(out.Bytes()), Stderr: validUTF8(errb.Bytes()), Truncated: truncated,
	}, nil
}

func validUTF8(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	return strings.ToValidUTF8(string(b), "\uFFFD")
}

// readSizes sets a command's output sizes from its recorded output.
func (s *Server) readSizes(c *api.Command) {
	l, err := s.node.Output(c.SandboxID, c.ID)
	if err != nil {
		return
	}
	defer l.Close()
	c.StdoutBytes, c.StderrBytes = l.Sizes()
}

// CommandOutput returns a command of a sandbox of the team and its
// recorded output, which the caller closes.
func (s *Server) CommandOutput(ctx context.Context, teamID, ref, commandID string) (api.Command, node.Output, error) {
	c, err := s.GetCommand(ctx, teamID, ref, commandID)
	if err != nil {
		return c, nil, err
	}
	l, err := s.node.Output(c.SandboxID, c.ID)
	return c, l, err
}

// runningCommand returns a command that still runs, or a conflict.
func (s *Server) runningCommand(ctx context.Context, teamID, ref, commandID string) (api.Command, error) {
	c, err := s.GetCommand(ctx, teamID, ref, commandID)
	if err != nil {
		return c, err
	}
	if c.State.Done() {
		return c, api.Errorf(api.CodeConflict, "command %s has ended (%s)", c.ID, c.State)
	}
	return c, nil
}

// Stdin appends r to a running command's stdin; eof closes it after.
func (s *Server) Stdin(ctx context.Context, teamID, ref, commandID string, r io.Reader, eof bool) error {
	c, err := s.runningCommand(ctx, teamID, ref, commandID)
	if err != nil {
		return err
	}
	if !c.Stdin {
		return api.Errorf(api.CodeConflict, "command %s was started without stdin; start it with \"stdin\": true", c.ID)
	}
	return s.node.Stdin(ctx, c.SandboxID, c.ID, r, eof)
}

// Signal sends a signal to a running command's process group.
func (s *Server) Signal(ctx context.Context, teamID, ref, commandID, sig string) error {
	if sig == "" {
		return invalid("signal is empty; name one such as TERM, KILL or INT")
	}
	c, err := s.runningCommand(ctx, teamID, ref, commandID)
	if err != nil {
		return err
	}
	return s.node.Signal(ctx, c.SandboxID, c.ID, sig)
}

// Resize changes the terminal size of a running PTY command.
func (s *Server) Resize(ctx context.Context, teamID, ref, commandID string, cols, rows int) error {
	if cols <= 0 || rows <= 0 || cols > 1000 || rows > 1000 {
		return invalid("cols and rows must be between 1 and 1000")
	}
	c, err := s.runningCommand(ctx, teamID, ref, commandID)
	if err != nil {
		return err
	}
	if c.PTY == nil {
		return api.Errorf(api.CodeConflict, "command %s has no terminal; start it with \"pty\"", c.ID)
	}
	return s.node.Resize(ctx, c.SandboxID, c.ID, node.TermSize{Cols: cols, Rows: rows})
}
