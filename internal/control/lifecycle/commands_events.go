package lifecycle

import (
	"context"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/commands"
	"github.com/cove-dev/cove/internal/control/events"
	"github.com/cove-dev/cove/internal/control/imagecatalog"
	"github.com/cove-dev/cove/internal/control/runs"
	"github.com/cove-dev/cove/internal/control/vault"
	"github.com/cove-dev/cove/internal/node"
)

// A sandbox's commands are internal/control/commands and the teams' event
// logs internal/control/events; the core builds both over the small
// interfaces they declare (cmdDeps, eventDeps) and keeps here the calls
// it makes into them. The change broadcast (notify, changes) stays the
// core's: the event log is given it.

const maxTimeoutS = runs.MaxTimeoutS

// Names the API and the tests know the queries by.
type (
	// CommandQuery selects a page of a sandbox's commands.
	CommandQuery = commands.Query
	// EventQuery selects a page of a team's events.
	EventQuery = events.Query
)

// OnExit takes the node's report of a command's end and hands it to the
// receiver registered for its run (a workload, a self-test), or records
// it as a sandbox's command's. The node calls it.
func (s *Core) OnExit(runID, commandID string, e node.Exit, lost bool) {
	s.exits.Deliver(runID, commandID, e, lost)
}

// Changes returns a channel closed at the next change of any sandbox,
// command or event; long-polls and streams wait on it.
func (s *Core) Changes() <-chan struct{} { return s.changes() }

// SandboxRefusal is the budget rule of a command in a living sandbox:
// its own spend limit, then its team's (runs.Checker.Budget).
func (c runChecks) SandboxRefusal(ctx context.Context, sb api.Sandbox) error {
	return c.s.svc.Meter.BudgetRefusal(ctx, sb)
}

// eventDeps is the core as the event log's Sandboxes, Broadcast and
// Telemetry (read when called: telemetry is set after New).
type eventDeps struct{ s *Core }

var (
	_ events.Sandboxes = eventDeps{}
	_ events.Broadcast = eventDeps{}
	_ events.Telemetry = eventDeps{}
)

func (d eventDeps) GetSandbox(ctx context.Context, teamID, ref string) (api.Sandbox, error) {
	return d.s.GetSandbox(ctx, teamID, ref)
}
func (d eventDeps) Notify()                  { d.s.notify() }
func (d eventDeps) Changes() <-chan struct{} { return d.s.changes() }
func (d eventDeps) Event(e api.Event)        { d.s.telemetry.Event(e) }

// cmdDeps is the core as the commands' sandboxes and images, cmdSecrets
// its secrets and cmdTelemetry its telemetry (read when called: set after
// New). The commands' node is coreNode.
type (
	cmdDeps      struct{ s *Core }
	cmdSecrets   struct{ s *Core }
	cmdTelemetry struct{ s *Core }
)

var (
	_ commands.Sandboxes = cmdDeps{}
	_ commands.Images    = cmdDeps{}
	_ commands.Secrets   = cmdSecrets{}
	_ commands.Telemetry = cmdTelemetry{}
)

func (d cmdDeps) ActiveSandbox(ctx context.Context, teamID, ref string) (api.Sandbox, error) {
	return d.s.activeSandbox(ctx, teamID, ref)
}
func (d cmdDeps) LiveSandbox(ctx context.Context, teamID, ref string, wake bool) (api.Sandbox, error) {
	return d.s.LiveSandbox(ctx, teamID, ref, wake)
}
func (d cmdDeps) TouchAt(sandboxID string, t time.Time) { d.s.touchAt(sandboxID, t) }
func (d cmdDeps) Exited()                               { d.s.exited() }

func (d cmdDeps) Image(teamID, template string) (api.Image, bool) {
	return d.s.svc.Images.Image(teamID, template)
}
func (d cmdDeps) NodeTemplate(teamID, template string) string {
	return d.s.svc.Images.NodeTemplate(teamID, template)
}
func (d cmdDeps) Command(img api.Image, req api.CreateCommandRequest, user string, u node.User, env map[string]string) (node.User, map[string]string, error) {
	return imagecatalog.Command(img, req, user, u, env)
}

func (d cmdSecrets) Exec(ctx context.Context, sb api.Sandbox, req api.CreateCommandRequest, cmd *api.Command, spec *node.ExecSpec) error {
	return d.s.svc.Vault.Exec(ctx, sb, req, cmd, spec)
}

func (d cmdSecrets) Open(ctx context.Context, teamID string, refs map[string]string) (map[string]string, []node.Secret, error) {
	values, err := runChecks{d.s}.Resolve(ctx, teamID, refs)
	if err != nil {
		return nil, nil, err
	}
	return values, vault.Redactions(refs, values), nil
}

func (d cmdTelemetry) Exec(t time.Duration) { d.s.telemetry.Exec(t) }
