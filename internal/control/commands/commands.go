// Package commands is the commands of running sandboxes: starting one
// (Exec, and Start for the core's setup), reading it (Get, List, Wait,
// its recorded output), its input, signals and terminal size, and
// recording how it ended (Exited) with its events in order:
// command.started always before command.exited. It also builds the
// node's spec of any run's program from its runs.Spec (Program), so a
// workload's program is built as a command's is.
//
// It declares what it needs (Store, Node, Sandboxes, Images, Secrets,
// Events, Telemetry) and imports neither the core nor a feature.
package commands

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/runs"
	"github.com/cove-dev/cove/internal/keylock"
	"github.com/cove-dev/cove/internal/node"
	"github.com/cove-dev/cove/internal/store"
)

// Store is the part of the store the commands use.
type Store interface {
	CreateCommand(ctx context.Context, c api.Command) error
	GetCommand(ctx context.Context, sandboxID, id string) (api.Command, error)
	UpdateCommand(ctx context.Context, c api.Command) error
	// UpdateCommandEvent is UpdateCommand and the append of its event
	// in one transaction.
	UpdateCommandEvent(ctx context.Context, c api.Command, teamID string, e api.Event) (api.Event, error)
	DeleteCommand(ctx context.Context, sandboxID, id string) error
	ListCommands(ctx context.Context, f store.CommandFilter) ([]api.Command, error)
	GetSandbox(ctx context.Context, teamID, id string) (api.Sandbox, error)
}

// Node is the part of the node that runs commands and records their
// output.
type Node interface {
	Exec(ctx context.Context, sandboxID string, spec node.ExecSpec) (node.Started, error)
	Output(sandboxID, commandID string) (node.Output, error)
	Stdin(ctx context.Context, sandboxID, commandID string, r io.Reader, eof bool) error
	Signal(ctx context.Context, sandboxID, commandID, sig string) error
	Resize(ctx context.Context, sandboxID, commandID string, size node.TermSize) error
}

// Sandboxes is what the commands ask of the sandbox life cycle (the
// core).
type Sandboxes interface {
	// ActiveSandbox finds a sandbox of the team by ID or name and counts
	// the call as activity for its idle timeout.
	ActiveSandbox(ctx context.Context, teamID, ref string) (api.Sandbox, error)
	// LiveSandbox returns the sandbox running: an asleep one is woken
	// (unless wake is false, a conflict then), a sleeping or waking one
	// waited for, within ctx.
	LiveSandbox(ctx context.Context, teamID, ref string, wake bool) (api.Sandbox, error)
	// TouchAt records activity on a sandbox at t (a command's end).
	TouchAt(sandboxID string, t time.Time)
	// Exited wakes the core's waiters for a command's end (setup).
	Exited()
}

// Images is what a command's program takes of its sandbox's template.
type Images interface {
	// Image is the imported image a template names for the team, if any.
	Image(teamID, template string) (api.Image, bool)
	// NodeTemplate is the node's name of the template.
	NodeTemplate(teamID, template string) string
	// Command fits a program's user and environment to an image.
	Command(img api.Image, req api.CreateCommandRequest, user string, u node.User, env map[string]string) (node.User, map[string]string, error)
}

// Secrets resolves the secrets a program is given, when it starts.
type Secrets interface {
	// Exec resolves a sandbox command's secrets (the sandbox's and its
	// own) into spec's env and redactions and cmd's names.
	Exec(ctx context.Context, sb api.Sandbox, req api.CreateCommandRequest, cmd *api.Command, spec *node.ExecSpec) error
	// Open resolves secret references (variable → name) to their values
	// and the node's redactions of them.
	Open(ctx context.Context, teamID string, refs map[string]string) (map[string]string, []node.Secret, error)
}

// Events appends to the teams' event logs.
type Events interface {
	Emit(ctx context.Context, teamID, typ, sandboxID, commandID string, data map[string]any)
	// Event makes an event to store with a command's update
	// (UpdateCommandEvent); Appended tells of it once stored.
	Event(typ, sandboxID, commandID string, data map[string]any) api.Event
	Appended(e api.Event)
}

// Telemetry times how long commands take to start.
type Telemetry interface {
	Exec(d time.Duration)
}

// Config bounds the commands' answers.
type Config struct {
	// WaitOutputMax cuts each stream of a WaitCommand answer.
	WaitOutputMax int64
}

// Deps are the services the commands use.
type Deps struct {
	Store     Store
	Node      Node
	Sandboxes Sandboxes
	Images    Images
	Secrets   Secrets
	Events    Events
	Telemetry Telemetry
	// Checks hold the budget rule a command is refused by.
	Checks runs.Checker
	Log    *slog.Logger
	Now    func() time.Time
}

// Service is the sandboxes' commands.
type Service struct {
	cfg Config
	d   Deps
	// ctx bounds the background work (the silence watches); wg counts it.
	ctx context.Context
	wg  *sync.WaitGroup
	// locks hold a command's exit back until its start is recorded, so
	// command.started always comes before command.exited.
	locks keylock.Map
	// started are the commands this service started, as it stored them,
	// with their team: Exited updates from them without reading the
	// command and its sandbox again (a stale one, changed elsewhere, is
	// read again), and WaitCommand finds them without a read. Once
	// Exited has stored a command's end it is kept a while longer as
	// stored (ended, oldest first), so that a wait under way answers it
	// without reading it back.
	startedMu sync.Mutex
	started   map[string]*startedCommand
	ended     []string
}

// startedCommand is a command as its start stored it, and its team.
type startedCommand struct {
	cmd    api.Command
	teamID string
	// endedAt is the end's time, taken once by the first of Exited and
	// a wait to see the end, so that both answer the same.
	endedAt time.Time
	// final is the command as Exited stored its end.
	final *api.Command
}

// maxStarted bounds the started commands kept; past it a command's end
// reads it from the store, as one started elsewhere.
const maxStarted = 1 << 16

// maxEnded bounds the ended commands kept for the waits under way.
const maxEnded = 1 << 10

func (s *Service) rememberStarted(teamID string, c api.Command) {
	s.startedMu.Lock()
	defer s.startedMu.Unlock()
	if s.started == nil {
		s.started = map[string]*startedCommand{}
	}
	if len(s.started) < maxStarted+maxEnded {
		s.started[c.ID] = &startedCommand{cmd: c, teamID: teamID}
	}
}

// startedCommand returns a command this service started and that has
// not ended, as stored at its start.
func (s *Service) startedCommand(sandboxID, commandID string) (startedCommand, bool) {
	s.startedMu.Lock()
	defer s.startedMu.Unlock()
	st, ok := s.started[commandID]
	if !ok || st.cmd.SandboxID != sandboxID || st.final != nil {
		return startedCommand{}, false
	}
	return *st, true
}

// endedAt is when a command ended: the time the first to ask for it
// took, for a command this service started.
func (s *Service) endedAt(commandID string) time.Time {
	s.startedMu.Lock()
	defer s.startedMu.Unlock()
	st, ok := s.started[commandID]
	if !ok {
		return s.d.Now()
	}
	if st.endedAt.IsZero() {
		st.endedAt = s.d.Now()
	}
	return st.endedAt
}

// stored notes that Exited stored a command's end as c (nil: it did not,
// and a wait reads the store): it stays for the waits under way until
// maxEnded more commands ended.
func (s *Service) stored(commandID string, c *api.Command) {
	s.startedMu.Lock()
	defer s.startedMu.Unlock()
	st, ok := s.started[commandID]
	if !ok {
		return
	}
	if c == nil {
		delete(s.started, commandID)
		return
	}
	final := *c
	st.final = &final
	s.ended = append(s.ended, commandID)
	if len(s.ended) > maxEnded {
		delete(s.started, s.ended[0])
		s.ended = slices.Delete(s.ended, 0, 1)
	}
}

// endOf returns how a command this service started ended, given the exit
// its recorded output holds: as Exited stored it, or, before Exited has,
// as it will (the same end time).
func (s *Service) endOf(sandboxID, commandID string, e node.Exit) (api.Command, bool) {
	s.startedMu.Lock()
	st, ok := s.started[commandID]
	if !ok || st.cmd.SandboxID != sandboxID {
		s.startedMu.Unlock()
		return api.Command{}, false
	}
	if st.final != nil {
		c := *st.final
		s.startedMu.Unlock()
		return c, true
	}
	c := st.cmd
	s.startedMu.Unlock()
	s.applyExit(&c, e, e.Lost)
	return c, true
}

// New returns the commands service; its background work runs on ctx,
// counted in wg.
func New(ctx context.Context, wg *sync.WaitGroup, cfg Config, d Deps) *Service {
	return &Service{cfg: cfg, d: d, ctx: ctx, wg: wg}
}
