package commands

import (
	"bytes"
	"context"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/page"
	"github.com/cove-dev/cove/internal/id"
	"github.com/cove-dev/cove/internal/node"
	"github.com/cove-dev/cove/internal/store"
)

// GetCommand returns a command of a sandbox of the team.
func (s *Service) GetCommand(ctx context.Context, teamID, ref, commandID string) (api.Command, error) {
	sb, err := s.d.Sandboxes.ActiveSandbox(ctx, teamID, ref)
	if err != nil {
		return api.Command{}, err
	}
	return s.sandboxCommand(ctx, sb, commandID)
}

// sandboxCommand is GetCommand of a sandbox found.
func (s *Service) sandboxCommand(ctx context.Context, sb api.Sandbox, commandID string) (api.Command, error) {
	if !id.HasPrefix(commandID, "cmd") {
		return api.Command{}, api.Errorf(api.CodeNotFound, "command %q not found", commandID)
	}
	c, err := s.d.Store.GetCommand(ctx, sb.ID, commandID)
	if err != nil {
		return c, err
	}
	if c.State == api.CommandRunning {
		// Sizes grow while it runs, and the log has the exit before the
		// store does: answer from the log, as a reader of the output
		// sees it.
		l, err := s.d.Node.Output(c.SandboxID, c.ID)
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

// Query selects a page of a sandbox's commands, oldest first.
type Query struct {
	States []api.CommandState
	page.Page
}

// ListCommands lists a page of a sandbox's commands.
func (s *Service) ListCommands(ctx context.Context, teamID, ref string, q Query) (api.List[api.Command], error) {
	limit, err := q.Size()
	if err != nil {
		return api.List[api.Command]{}, err
	}
	sb, err := s.d.Sandboxes.ActiveSandbox(ctx, teamID, ref)
	if err != nil {
		return api.List[api.Command]{}, err
	}
	items, err := s.d.Store.ListCommands(ctx, store.CommandFilter{SandboxID: sb.ID, States: q.States, After: q.Cursor, Limit: limit + 1})
	if err != nil {
		return api.List[api.Command]{}, err
	}
	return page.Cut(items, limit, func(c api.Command) string { return c.ID }), nil
}

// WaitCommand waits for a command to end and returns it with its output,
// each stream cut at the configured maximum.
func (s *Service) WaitCommand(ctx context.Context, teamID, ref, commandID string) (api.CommandResult, error) {
	// A command this service started and that has not ended is read
	// neither here nor its sandbox (named by ID, of the same team: the
	// wait after a start): the call counts as the sandbox's activity, and
	// the store is read once the command has ended, below.
	c := api.Command{SandboxID: ref, ID: commandID}
	if st, ok := s.startedCommand(ref, commandID); ok && st.teamID == teamID && teamID != "" {
		s.d.Sandboxes.TouchAt(ref, s.d.Now())
	} else {
		sb, err := s.d.Sandboxes.ActiveSandbox(ctx, teamID, ref)
		if err != nil {
			return api.CommandResult{}, err
		}
		c.SandboxID = sb.ID
		if _, ok := s.startedCommand(sb.ID, commandID); !ok {
			if c, err = s.sandboxCommand(ctx, sb, commandID); err != nil {
				return api.CommandResult{}, err
			}
		}
	}
	l, err := s.d.Node.Output(c.SandboxID, c.ID)
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
		cur, gerr := s.d.Store.GetCommand(ctx, c.SandboxID, c.ID)
		if gerr != nil || !cur.State.Done() {
			return api.CommandResult{}, err
		}
	}
	// The recorder reports the exit to the store right after the log has
	// it. A command this service started is answered as that report
	// stores it (or will: the same end) without reading it back; another
	// is read, and answered from the log so the caller never sees
	// "running" here.
	ended, known := api.Command{}, false
	if err == nil && exit != nil {
		ended, known = s.endOf(c.SandboxID, c.ID, *exit)
	}
	if known {
		c = ended
	} else {
		if c, err = s.d.Store.GetCommand(ctx, c.SandboxID, c.ID); err != nil {
			return api.CommandResult{}, err
		}
		if !c.State.Done() && exit != nil {
			s.applyExit(&c, *exit, exit.Lost)
		}
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

// CommandOutput returns a command of a sandbox of the team and its
// recorded output, which the caller closes.
func (s *Service) CommandOutput(ctx context.Context, teamID, ref, commandID string) (api.Command, node.Output, error) {
	c, err := s.GetCommand(ctx, teamID, ref, commandID)
	if err != nil {
		return c, nil, err
	}
	l, err := s.d.Node.Output(c.SandboxID, c.ID)
	return c, l, err
}

// runningCommand returns a command that still runs, or a conflict.
func (s *Service) runningCommand(ctx context.Context, teamID, ref, commandID string) (api.Command, error) {
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
func (s *Service) Stdin(ctx context.Context, teamID, ref, commandID string, r io.Reader, eof bool) error {
	c, err := s.runningCommand(ctx, teamID, ref, commandID)
	if err != nil {
		return err
	}
	if !c.Stdin {
		return api.Errorf(api.CodeConflict, "command %s was started without stdin; start it with \"stdin\": true", c.ID)
	}
	return s.d.Node.Stdin(ctx, c.SandboxID, c.ID, r, eof)
}

// Signal sends a signal to a running command's process group.
func (s *Service) Signal(ctx context.Context, teamID, ref, commandID, sig string) error {
	if sig == "" {
		return invalid("signal is empty; name one such as TERM, KILL or INT")
	}
	c, err := s.runningCommand(ctx, teamID, ref, commandID)
	if err != nil {
		return err
	}
	return s.d.Node.Signal(ctx, c.SandboxID, c.ID, sig)
}

// Resize changes the terminal size of a running PTY command.
func (s *Service) Resize(ctx context.Context, teamID, ref, commandID string, cols, rows int) error {
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
	return s.d.Node.Resize(ctx, c.SandboxID, c.ID, node.TermSize{Cols: cols, Rows: rows})
}
