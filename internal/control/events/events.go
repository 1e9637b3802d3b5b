// Package events is the teams' event logs: every step of a sandbox, a
// command or a workload appends an event (Emit, Record), callers page
// through them by cursor (List) and old ones expire (Expire). Appending
// wakes the waiters of the core's change broadcast, which it is given.
//
// It declares what it needs (Store, Sandboxes, Broadcast, Telemetry)
// and imports neither the core nor a feature.
package events

import (
	"context"
	"log/slog"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/page"
	"github.com/cove-dev/cove/internal/store"
)

// Store is the part of the store the event log uses.
type Store interface {
	AppendEvent(ctx context.Context, teamID string, e api.Event) (api.Event, error)
	ListEvents(ctx context.Context, f store.EventFilter) ([]api.Event, error)
	DeleteEventsBefore(ctx context.Context, t time.Time) (int64, error)
}

// Sandboxes finds a sandbox of a team by ID or name (the core).
type Sandboxes interface {
	GetSandbox(ctx context.Context, teamID, ref string) (api.Sandbox, error)
}

// Broadcast wakes whoever waits for the next change of a sandbox, a
// command or an event (long-polls, streams, the webhooks' dispatcher).
type Broadcast interface {
	Notify()
	Changes() <-chan struct{}
}

// Telemetry counts every event appended.
type Telemetry interface {
	Event(e api.Event)
}

// Config is how long events are kept.
type Config struct {
	Retention time.Duration
}

// Log is the teams' event logs.
type Log struct {
	cfg       Config
	store     Store
	sandboxes Sandboxes
	changes   Broadcast
	telemetry Telemetry
	log       *slog.Logger
	now       func() time.Time
}

// New returns the event logs over st.
func New(cfg Config, st Store, sandboxes Sandboxes, changes Broadcast, telemetry Telemetry, log *slog.Logger, now func() time.Time) *Log {
	return &Log{cfg: cfg, store: st, sandboxes: sandboxes, changes: changes, telemetry: telemetry, log: log, now: now}
}

// Emit appends an event to a team's log and wakes the waiters. An event
// that cannot be stored is logged, never allowed to fail the step it
// describes.
func (l *Log) Emit(ctx context.Context, teamID, typ, sandboxID, commandID string, data map[string]any) {
	if l.Record(ctx, teamID, typ, sandboxID, commandID, data) {
		l.changes.Notify()
	}
}

// Record is Emit without waking the waiters, for a transition with more
// than one event: its caller wakes them (Notify) once all are appended.
// It reports whether the event was stored.
func (l *Log) Record(ctx context.Context, teamID, typ, sandboxID, commandID string, data map[string]any) bool {
	e, err := l.store.AppendEvent(context.WithoutCancel(ctx), teamID, api.Event{
		Type: typ, SandboxID: sandboxID, CommandID: commandID, Time: l.now(), Data: data,
	})
	if err != nil {
		l.log.Error("append event", "type", typ, "sandbox", sandboxID, "err", err)
		return false
	}
	l.log.Debug("event", "id", e.ID, "type", typ, "sandbox", sandboxID, "command", commandID)
	l.telemetry.Event(e)
	return true
}

// Event is an event of a team's log, stamped now, for a store call that
// writes it in the transaction of the change it tells of (a command's
// update); Appended then tells of it as Emit would.
func (l *Log) Event(typ, sandboxID, commandID string, data map[string]any) api.Event {
	return api.Event{Type: typ, SandboxID: sandboxID, CommandID: commandID, Time: l.now(), Data: data}
}

// Appended counts an event that was stored with its change and wakes the
// waiters, as Emit does after storing one.
func (l *Log) Appended(e api.Event) {
	l.log.Debug("event", "id", e.ID, "type", e.Type, "sandbox", e.SandboxID, "command", e.CommandID)
	l.telemetry.Event(e)
	l.changes.Notify()
}

// Notify wakes the waiters (after Record).
func (l *Log) Notify() { l.changes.Notify() }

// Changes returns a channel closed at the next change of any sandbox,
// command or event; long-polls and streams wait on it.
func (l *Log) Changes() <-chan struct{} { return l.changes.Changes() }

// Query selects a page of a team's events, oldest first.
type Query struct {
	// Sandbox is a sandbox's ID or name; empty for all of the team's.
	Sandbox string
	Types   []string
	page.Page
}

// ListEvents returns a page of a team's events, oldest first, after the
// cursor (an event ID).
func (l *Log) ListEvents(ctx context.Context, teamID string, q Query) (api.List[api.Event], error) {
	if err := page.Scoped(teamID); err != nil {
		return api.List[api.Event]{}, err
	}
	limit, err := q.Size()
	if err != nil {
		return api.List[api.Event]{}, err
	}
	f := store.EventFilter{TeamID: teamID, Types: q.Types, After: q.Cursor, Limit: limit + 1}
	if q.Sandbox != "" {
		sb, err := l.sandboxes.GetSandbox(ctx, teamID, q.Sandbox)
		if err != nil {
			return api.List[api.Event]{}, err
		}
		f.SandboxID = sb.ID
	}
	items, err := l.store.ListEvents(ctx, f)
	if err != nil {
		return api.List[api.Event]{}, err
	}
	return page.Cut(items, limit, func(e api.Event) string { return e.ID }), nil
}

// Expire drops the events older than the retention.
func (l *Log) Expire(ctx context.Context) {
	n, err := l.store.DeleteEventsBefore(ctx, l.now().Add(-l.cfg.Retention))
	if err != nil {
		l.log.Warn("expire events", "err", err)
		return
	}
	if n > 0 {
		l.log.Info("events expired", "count", n, "retention", l.cfg.Retention.String())
	}
}
