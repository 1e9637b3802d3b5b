package server

import (
	"context"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/node/output"
	"github.com/cove-dev/cove/internal/store"
)

// emit appends an event to a team's log. An event that cannot be stored is
// logged, never allowed to fail the step it describes.
func (s *Server) emit(ctx context.Context, teamID, typ, sandboxID, commandID string, data map[string]any) {
	e, err := s.store.AppendEvent(context.WithoutCancel(ctx), teamID, api.Event{
		Type: typ, SandboxID: sandboxID, CommandID: commandID, Time: s.now(), Data: data,
	})
	if err != nil {
		s.log.Error("append event", "type", typ, "sandbox", sandboxID, "err", err)
		return
	}
	s.log.Debug("event", "id", e.ID, "type", typ, "sandbox", sandboxID, "command", commandID)
	s.notify()
}

// ListEvents returns a team's events, oldest first.
func (s *Server) ListEvents(ctx context.Context, f store.EventFilter) ([]api.Event, error) {
	return s.store.ListEvents(ctx, f)
}

// Changes returns a channel closed at the next change of any sandbox,
// command or event; long-polls and streams wait on it.
func (s *Server) Changes() <-chan struct{} { return s.changes() }

// watchSilence raises command.no_output after every silence of the given
// length while the command runs: once per silence, re-armed by new output.
func (s *Server) watchSilence(teamID string, c api.Command, l *output.Log) {
	if c.NoOutputAlertS <= 0 {
		return
	}
	silence := time.Duration(c.NoOutputAlertS) * time.Second
	s.wg.Go(func() {
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
