package lifecycle

import (
	"context"
	"io"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/runs"
	"github.com/cove-dev/cove/internal/control/uploads"
	"github.com/cove-dev/cove/internal/metering"
	"github.com/cove-dev/cove/internal/node"
	"github.com/cove-dev/cove/internal/store"
)

// The feature services the core calls, each through the small interface
// the core declares of it. They are built by the wiring
// (internal/service) over the core's Ports and given to the core in one
// Use, before Recover.

// Services are the feature services the core calls.
type Services struct {
	Teams        Teams
	Vault        Vault
	Meter        Meter
	Observations Observations
	Images       Images
	Templates    Templates
	Previews     Previews
	Uploads      Uploads
	Assets       Assets
	Workloads    Workloads
	Events       Events
	Commands     Commands
}

// Use gives the core its feature services; call it once, after New and
// before Recover or Start.
func (s *Core) Use(svc Services) { s.svc = svc }

// Events is what the core asks of the teams' event logs.
type Events interface {
	// Emit appends an event and wakes waiters; Record appends one
	// without waking them and says whether it was stored.
	Emit(ctx context.Context, teamID, typ, sandboxID, commandID string, data map[string]any)
	Record(ctx context.Context, teamID, typ, sandboxID, commandID string, data map[string]any) bool
	// Event is an event stamped now, for a store call that writes it in
	// the transaction of its change (a sandbox's state); Appended then
	// tells of it and wakes waiters as Emit does.
	Event(typ, sandboxID, commandID string, data map[string]any) api.Event
	Appended(e api.Event)
	Expire(ctx context.Context)
}

// Commands is what the core asks of the commands: a setup's commands,
// the end of a sandbox's command, the no-output watch resumed at
// Recover, and a workload's program.
type Commands interface {
	Start(ctx context.Context, sb api.Sandbox, req api.CreateCommandRequest) (api.Command, error)
	Exited(sandboxID, commandID string, e node.Exit, lost bool)
	WatchSilence(teamID string, c api.Command)
	Program(ctx context.Context, runID string, sp runs.Spec) (node.ExecSpec, error)
}

// Teams is what the core asks of the teams: admission, and the expiry of
// idempotent answers.
type Teams interface {
	RequireAdmission(ctx context.Context, teamID, flag string) error
	ExpireIdempotent(ctx context.Context)
}

// Vault is what the core asks of the teams' secrets.
type Vault interface {
	Exec(ctx context.Context, sb api.Sandbox, req api.CreateCommandRequest, cmd *api.Command, spec *node.ExecSpec) error
	Values(ctx context.Context, teamID string, refs map[string]string) (map[string]string, error)
	SandboxRedactions(ctx context.Context, sb api.Sandbox) []node.Secret
	Injection(ctx context.Context, sb api.Sandbox) []node.InjectSecret
}

// Meter is what the core asks of the meter: prices, budgets, its loop.
type Meter interface {
	Run(ctx context.Context)
	Priced(sb api.Sandbox) api.Sandbox
	BudgetRefusal(ctx context.Context, sb api.Sandbox) error
	TeamBudgetRefusal(ctx context.Context, teamID string) error
	Hourly(id, teamID string, from, to time.Time, use metering.Use) []store.Accrual
}

// Observations is what the core asks of the network observations.
type Observations interface {
	Run(ctx context.Context)
	Expire(ctx context.Context)
	CheckCommand(ctx context.Context, sandboxID, cmd string) string
}

// Images is what the core asks of the image catalog.
type Images interface {
	Load(ctx context.Context) error
	Image(teamID, template string) (api.Image, bool)
	Use(ctx context.Context, teamID string, req *api.CreateSandboxRequest) (*api.Image, func(), error)
	NodeTemplate(teamID, name string) string
	DefaultUser(sb api.Sandbox) node.User
	TeamBytes(ctx context.Context, teamID string) (int64, error)
}

// Templates is what the core asks of the templates' catalog.
type Templates interface {
	Check(name string) error
	Ready(name string) bool
	// Admission is the flag a template needs, as team teamID names it.
	Admission(teamID, tmpl string) string
}

// Previews is what the core asks of the previews.
type Previews interface {
	PublishAll(ctx context.Context) error
}

// Uploads is the ledger the core counts its source uploads and the image
// uploads in.
type Uploads interface {
	Begin(teamID string, kind uploads.Kind) (*uploads.Upload, error)
	Spool(ctx context.Context, u *uploads.Upload, r io.Reader, max int64, want string, trailer func() (string, error), what string) (*uploads.Spooled, error)
}

// Assets is what the core asks of the assets: asset sources.
type Assets interface {
	Land(ctx context.Context, teamID, targetID, dir, assetID string, owner node.User) (string, error)
	CheckSource(ctx context.Context, teamID string, src *api.Source) error
	Kind() uploads.Kind
}

// Workloads is what the core asks of the workloads service.
type Workloads interface {
	Run(ctx context.Context)
	Recover(ctx context.Context) (map[string]bool, error)
	Meter(ctx context.Context, now time.Time) []api.Workload
	CancelTeam(ctx context.Context, t api.Team, spent float64)
	RefuseImage(ctx context.Context, img api.Image, owner string) error
}
