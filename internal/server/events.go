package server

import (
	"context"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/store"
)

// emit appends an event to a team's log. An event that cannot be stored is
// logged, never allowed to fail the step it describes.
func (s *Server) emit(ctx context.Context, teamID, typ, sandboxID, commandID string, data map[string]any) {
	if s.record(ctx, teamID, typ, sandboxID, commandID, data) {
		s.notify()
	}
}

// record is emit without waking the waiters, for a transition with more
// than one event: its caller wakes them once all are appended.
func (s *Server) record(ctx context.Context, teamID, typ, sandboxID, commandID string, data map[string]any) bool {
	e, err := s.store.AppendEvent(context.WithoutCancel(ctx), teamID, api.Event{
		Type: typ, SandboxID: sandboxID, CommandID: commandID, Time: s.now(), Data: data,
	})
	if err != nil {
		s.log.Error("append event", "type", typ, "sandbox", sandboxID, "err", err)
		return false
	}
	s.log.Debug("event", "id", e.ID, "type", typ, "sandbox", sandboxID, "command", commandID)
	s.telemetry.Event(e)
	return true
}

// EventQuery selects a page of a team's events, oldest first.
type EventQuery struct {
	// Sandbox is a sandbox's ID or name; empty for all of the team's.
	Sandbox string
	Types   []string
	Page
}

// ListEvents returns a page of a team's events, oldest first, after the
// cursor (an event ID).
func (s *Server) ListEvents(ctx context.Context, teamID string, q EventQuery) (api.List[api.Event], error) {
	if err := scoped(teamID); err != nil {
		return api.List[api.Event]{}, err
	}
	limit, err := q.Size()
	if err != nil {
		return api.List[api.Event]{}, err
	}
	f := store.EventFilter{TeamID: teamID, Types: q.Types, After: q.Cursor, Limit: limit + 1}
	if q.Sandbox != "" {
		sb, err := s.GetSandbox(ctx, teamID, q.Sandbox)
		if err != nil {
			return api.List[api.Event]{}, err
		}
		f.SandboxID = sb.ID
	}
	items, err := s.store.ListEvents(ctx, f)
	if err != nil {
		return api.List[api.Event]{}, err
	}
	return cut(items, limit, func(e api.Event) string { return e.ID }), nil
}

// Changes returns a channel closed at the next change of any sandbox,
// command or event; long-polls and streams wait on it.
func (s *Server) Changes() <-chan struct{} { return s.changes() }

// watchSilence raises command.no_output after every silence of the given
// length while the command runs: once per silence, re-armed by new output.
func (s *Server) watchSilence(teamID string, c api.Command) {
	if c.NoOutputAlertS <= 0 {
		return
	}
	l, err := s.node.Output(c.SandboxID, c.ID)
	if err != nil {
		s.log.Warn("watch a command's silence", "command", c.ID, "err", err)
		return
	}
	silence := time.Duration(c.NoOutputAlertS) * time.Second
	s.wg.Go(func() {
		defer l.Close()
		timer := time.NewTimer(silence)
		defer timer.Stop()
		alerted := false
		for {
			changed := l.Changed()
			if l.Ended() {
				return
			}
			select {
			case <-changed:
				alerted = false
				timer.Reset(silence)
			case <-timer.C:
				if !alerted {
					alerted = true
					s.emit(s.ctx, teamID, "command.no_output", c.SandboxID, c.ID, map[string]any{"silent_s": c.NoOutputAlertS})
				}
			case <-s.ctx.Done():
				return
			}
		}
	})
}

// expireEvents drops events older than the retention.
func (s *Server) expireEvents(ctx context.Context) {
	n, err := s.store.DeleteEventsBefore(ctx, s.now().Add(-s.cfg.EventRetention))
	if err != nil {
		s.log.Warn("expire events", "err", err)
		return
	}
	if n > 0 {
		s.log.Info("events expired", "count", n, "retention", s.cfg.EventRetention.String())
	}
}
