package commands

import (
	"context"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/runs"
	"github.com/cove-dev/cove/internal/id"
	"github.com/cove-dev/cove/internal/node"
	"github.com/cove-dev/cove/internal/store"
)

// Exec starts a command in a running sandbox. It returns once the command
// runs; its output is recorded on the node whether or not anyone reads it.
// An asleep sandbox is woken first, as for a file call, unless wake is
// false (a conflict then); one sleeping or waking is waited for, within
// ctx and the command's timeout_s, then woken if it ended asleep.
func (s *Service) Exec(ctx context.Context, teamID, ref string, wake bool, req api.CreateCommandRequest) (api.Command, error) {
	sb, err := s.d.Sandboxes.ActiveSandbox(ctx, teamID, ref)
	if err != nil {
		return api.Command{}, err
	}
	if err := s.d.Checks.Budget(ctx, runs.Spec{Kind: runs.Command, TeamID: sb.TeamID, Sandbox: &sb}); err != nil {
		return api.Command{}, err
	}
	cid := id.For(ctx, "cmd")
	if id.Resumed(ctx) {
		// The ID is derived from an Idempotency-Key whose claim this
		// attempt took over: a second attempt of the request (its first
		// on a replica that died) answers the command the first attempt
		// started, and never starts it again. A first attempt's derived
		// ID is new: nothing to look for.
		if c, err := s.d.Store.GetCommand(ctx, sb.ID, cid); err == nil {
			return c, nil
		} else if api.ErrorCode(err) != api.CodeNotFound {
			return api.Command{}, err
		}
	}
	if sb.State != api.StateRunning {
		if sb, err = s.live(ctx, sb, wake, req.TimeoutS); err != nil {
			return api.Command{}, err
		}
	}
	return s.start(ctx, cid, sb, req)
}

// live brings a sandbox that is not running to running through the core's
// wake (its events, charges and budget rule are a wake's), waiting no
// longer than the command's own timeout when it has one.
func (s *Service) live(ctx context.Context, sb api.Sandbox, wake bool, timeoutS *int64) (api.Sandbox, error) {
	switch sb.State {
	case api.StateAsleep, api.StateSleeping, api.StateWaking:
	default:
		return sb, api.Errorf(api.CodeConflict, "sandbox %s is %s; commands run only in a running sandbox", sb.ID, sb.State)
	}
	if timeoutS != nil && *timeoutS > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(*timeoutS)*time.Second)
		defer cancel()
	}
	return s.d.Sandboxes.LiveSandbox(ctx, sb.TeamID, sb.ID, wake)
}

// Start starts a command in a sandbox whose state the caller checked
// (Exec, the core's setup).
func (s *Service) Start(ctx context.Context, sb api.Sandbox, req api.CreateCommandRequest) (api.Command, error) {
	return s.start(ctx, id.For(ctx, "cmd"), sb, req)
}

func (s *Service) start(ctx context.Context, cid string, sb api.Sandbox, req api.CreateCommandRequest) (api.Command, error) {
	start := time.Now()
	cmd, spec, err := s.newCommand(cid, sb, req)
	if err != nil {
		return api.Command{}, err
	}
	if err := s.d.Secrets.Exec(ctx, sb, req, &cmd, &spec); err != nil {
		return api.Command{}, err
	}
	if err := s.d.Store.CreateCommand(ctx, cmd); err != nil {
		return api.Command{}, err
	}
	cmd.Version = 1 // as stored
	unlock := s.locks.Lock(cmd.ID)
	defer unlock()
	started, err := s.d.Node.Exec(ctx, sb.ID, spec)
	if err != nil {
		// Nothing ran: the command must not linger as running.
		if derr := s.d.Store.DeleteCommand(context.WithoutCancel(ctx), sb.ID, cmd.ID); derr != nil {
			s.d.Log.Error("remove command that did not start", "command", cmd.ID, "err", derr)
		}
		return api.Command{}, err
	}
	s.d.Telemetry.Exec(time.Since(start))
	data := map[string]any{"argv": req.Argv, "command": req.Command}
	if started.PID > 0 {
		// Its pid and command.started are stored in one transaction.
		cmd = s.recordPID(context.WithoutCancel(ctx), sb.TeamID, cmd, started.PID, data)
	} else {
		s.d.Events.Emit(ctx, sb.TeamID, "command.started", sb.ID, cmd.ID, data)
	}
	s.rememberStarted(sb.TeamID, cmd)
	s.d.Log.Info("command started", "sandbox", sb.ID, "command", cmd.ID)
	s.WatchSilence(sb.TeamID, cmd)
	return cmd, nil
}

// recordPID stores the pid of a command that started, with its
// command.started event (data) in the same transaction, and returns the
// command as stored. This replica's exit of it waits on the lock its
// caller holds; another replica may have recorded its end (or marked it
// lost) meanwhile, which stays, pid and all. A failure leaves the pid
// unknown (0), not the command unstarted: it runs, and its event is
// appended alone.
func (s *Service) recordPID(ctx context.Context, teamID string, cmd api.Command, pid int, data map[string]any) api.Command {
	alone := func(c api.Command) api.Command {
		s.d.Events.Emit(ctx, teamID, "command.started", cmd.SandboxID, cmd.ID, data)
		return c
	}
	c := cmd
	for attempt := 1; ; attempt++ {
		c.PID = pid
		e, err := s.d.Store.UpdateCommandEvent(ctx, c, teamID, s.d.Events.Event("command.started", cmd.SandboxID, cmd.ID, data))
		if err == nil {
			c.Version++
			s.d.Events.Appended(e)
			return c
		}
		if !store.Stale(err) || attempt == store.UpdateAttempts {
			s.d.Log.Error("record a command's pid", "command", cmd.ID, "err", err)
			return alone(cmd)
		}
		if c, err = s.d.Store.GetCommand(ctx, cmd.SandboxID, cmd.ID); err != nil {
			s.d.Log.Error("read a command to record its pid", "command", cmd.ID, "err", err)
			return alone(cmd)
		}
		if c.State.Done() {
			return alone(c)
		}
	}
}

// maxTag bounds a command's tag, in bytes.
const maxTag = 256

// NewCommand checks a command request and returns the command to store
// and the node's spec of it, its secrets not yet resolved.
func (s *Service) NewCommand(sb api.Sandbox, req api.CreateCommandRequest) (api.Command, node.ExecSpec, error) {
	return s.newCommand(id.New("cmd"), sb, req)
}

func (s *Service) newCommand(cid string, sb api.Sandbox, req api.CreateCommandRequest) (api.Command, node.ExecSpec, error) {
	fail := func(err error) (api.Command, node.ExecSpec, error) {
		return api.Command{}, node.ExecSpec{}, err
	}
	if err := runs.CheckProgram(req.Command, req.Argv); err != nil {
		return fail(err)
	}
	cwd := sb.Workdir
	if req.Cwd != "" {
		var err error
		if cwd, err = runs.CheckPath("cwd", req.Cwd); err != nil {
			return fail(err)
		}
	}
	if err := runs.CheckEnv("env", req.Env); err != nil {
		return fail(err)
	}
	if len(req.Tag) > maxTag || !utf8.ValidString(req.Tag) {
		return fail(invalid("tag must be at most %d bytes of UTF-8", maxTag))
	}
	var timeout int64
	if req.TimeoutS != nil {
		timeout = *req.TimeoutS
	}
	user, u, err := checkUser(req.User, timeout)
	if err != nil {
		return fail(err)
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
	env, u, err := s.environ(sb.TeamID, sb.Template, req, user, u, size != nil, "COVE_SANDBOX_ID", sb.ID)
	if err != nil {
		return fail(err)
	}
	for k, v := range sb.Env {
		env[k] = v
	}
	for k, v := range req.Env {
		env[k] = v
	}
	cmd := api.Command{
		ID: cid, SandboxID: sb.ID, Command: req.Command, Argv: req.Argv,
		Cwd: cwd, Env: req.Env, User: user, TimeoutS: timeout, Stdin: req.Stdin,
		PTY: req.PTY, NoOutputAlertS: noOutput, State: api.CommandRunning, StartedAt: s.d.Now(), Tag: req.Tag,
	}
	spec := node.ExecSpec{
		ID: cmd.ID, Template: s.d.Images.NodeTemplate(sb.TeamID, sb.Template), Shell: req.Command, Argv: req.Argv,
		Cwd: cwd, Env: env, UID: u.UID, GID: u.GID,
		Stdin: req.Stdin, Timeout: time.Duration(timeout) * time.Second, PTY: size,
	}
	return cmd, spec, nil
}

// Program is the node's spec of a run's program (a workload's), built
// from its checked runs.Spec as a command's is: the run's ID is the
// command's and names it in the environment (COVE_WORKLOAD_ID), and its
// secrets are resolved now.
func (s *Service) Program(ctx context.Context, runID string, sp runs.Spec) (node.ExecSpec, error) {
	if err := runs.CheckProgram(sp.Command, sp.Argv); err != nil {
		return node.ExecSpec{}, err
	}
	user, u, err := checkUser(sp.User, sp.TimeoutS)
	if err != nil {
		return node.ExecSpec{}, err
	}
	req := api.CreateCommandRequest{Command: sp.Command, Argv: sp.Argv}
	env, u, err := s.environ(sp.TeamID, sp.Template, req, user, u, false, "", "")
	if err != nil {
		return node.ExecSpec{}, err
	}
	for k, v := range sp.Env {
		env[k] = v
	}
	delete(env, "COVE_SANDBOX_ID")
	if sp.Kind == runs.Workload {
		env["COVE_WORKLOAD_ID"] = runID
	}
	values, redact, err := s.d.Secrets.Open(ctx, sp.TeamID, sp.Secrets)
	if err != nil {
		return node.ExecSpec{}, err
	}
	for k, v := range values {
		env[k] = v
	}
	return node.ExecSpec{
		ID: runID, Template: s.d.Images.NodeTemplate(sp.TeamID, sp.Template), Shell: sp.Command, Argv: sp.Argv,
		Cwd: sp.Workdir, Env: env, UID: u.UID, GID: u.GID,
		Timeout: time.Duration(sp.TimeoutS) * time.Second, Secrets: redact,
	}, nil
}

// checkUser checks a program's user ("" is user) and timeout.
func checkUser(user string, timeout int64) (string, node.User, error) {
	if user == "" {
		user = "user"
	}
	u, ok := node.Users[user]
	if !ok {
		return "", u, invalid("user %q is unknown; use user or root", user)
	}
	if timeout < 0 || timeout > runs.MaxTimeoutS {
		return "", u, rangeError("timeout_s", fmt.Sprint(timeout), "0", fmt.Sprint(runs.MaxTimeoutS))
	}
	return user, u, nil
}

// environ is a program's base environment, fitted to its template's
// image; idVar, when set, names the run in it.
func (s *Service) environ(teamID, template string, req api.CreateCommandRequest, user string, u node.User, pty bool, idVar, runID string) (map[string]string, node.User, error) {
	env := map[string]string{
		"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME": u.Home, "USER": user, "LOGNAME": user, "LANG": "C.UTF-8",
	}
	if idVar != "" {
		env[idVar] = runID
	}
	if pty {
		env["TERM"] = "xterm-256color"
	}
	if img, ok := s.d.Images.Image(teamID, template); ok {
		var err error
		if u, env, err = s.d.Images.Command(img, req, user, u, env); err != nil {
			return nil, u, err
		}
	}
	return env, u, nil
}

func invalid(format string, args ...any) error {
	return api.Errorf(api.CodeInvalidArgument, format, args...)
}

func rangeError(field, got, lo, hi string) error {
	return &api.Error{
		Code:    api.CodeInvalidArgument,
		Message: fmt.Sprintf("%s is %s; it must be between %s and %s", field, got, lo, hi),
		Details: map[string]any{"field": field, "min": lo, "max": hi},
	}
}
