// Package workloads runs batch work: a workload is stored queued, placed
// on the node by the queue's one owner (Run) when the node has room and
// the GPUs it asks for, then run to completion in a container of its own
// that the node starts exactly as it starts a sandbox (same runtime, own
// host ID range, network fence with an empty policy, seccomp), with its
// program as one recorded command. Its output is recorded and served as a
// command's; its container goes when the program ends, its output stays.
// It is charged for what it holds from its placement to its end.
//
// It works over the narrow interfaces it declares (Store, Node, Core,
// Images, Events, Meter) and the runs checks; the lifecycle core
// (internal/control/lifecycle) provides them and delegates to it.
package workloads

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/runs"
	"github.com/cove-dev/cove/internal/metering"
	"github.com/cove-dev/cove/internal/node"
	"github.com/cove-dev/cove/internal/store"
)

// Store is what the workloads keep in the store.
type Store interface {
	CreateWorkload(ctx context.Context, w api.Workload) error
	GetWorkload(ctx context.Context, teamID, id string) (api.Workload, error)
	UpdateWorkload(ctx context.Context, w api.Workload) error
	ListWorkloads(ctx context.Context, f store.WorkloadFilter) ([]api.Workload, error)
	PutWorkloadUsage(ctx context.Context, accruals []store.Accrual) error
	GetIDRange(ctx context.Context, sandboxID string) (store.IDRange, error)
}

// Node is what a workload asks of the node: room, a container, its
// program, its recorded output.
type Node interface {
	Admit(ctx context.Context, spec node.SandboxSpec) error
	Start(ctx context.Context, spec node.SandboxSpec) error
	Attach(ctx context.Context, spec node.SandboxSpec, running []string) error
	DestroyRuntime(ctx context.Context, id string) error
	Exec(ctx context.Context, sandboxID string, spec node.ExecSpec) (node.Started, error)
	Output(sandboxID, commandID string) (node.Output, error)
}

// GPUNode is a node's optional ability to advertise its GPUs; a node
// without it has none.
type GPUNode interface {
	GPUs() node.GPUs
}

// Images resolves the templates and images a workload names.
type Images interface {
	// Resolve resolves req's image when it names an imported one: seen
	// by the team (else not_found), its defaults filling what req leaves
	// out (its workdir in req). It returns the image (nil for a
	// template), the resources asked for and a release to call once the
	// workload is stored.
	Resolve(ctx context.Context, teamID string, req *api.CreateWorkloadRequest) (*api.Image, *api.ResourcesRequest, func(), error)
	// Exists says whether the team can run template tmpl (a template of
	// the server or an image it sees).
	Exists(teamID, tmpl string) bool
	// NodeTemplate is the name the node knows tmpl by.
	NodeTemplate(teamID, tmpl string) string
	// DefaultUser is the account that owns a run's files.
	DefaultUser(teamID, tmpl string) node.User
}

// Core is what the lifecycle core does for a workload's run.
type Core interface {
	// ResolveResources applies the defaults and bounds of resources.
	ResolveResources(r *api.ResourcesRequest) (api.Resources, error)
	// CheckSource validates a source and returns what the run keeps.
	CheckSource(src *api.Source) (*api.Source, error)
	AllocRange(ctx context.Context, id string) (node.IDRange, error)
	ReleaseRange(ctx context.Context, id string)
	// LandAsset and CloneSource put a source into dir of a started
	// container and return its digest or commit.
	LandAsset(ctx context.Context, teamID, targetID, dir, assetID string, owner node.User) (string, error)
	CloneSource(ctx context.Context, teamID, targetID, dir string, src api.Source, owner node.User) (string, error)
	// ExecSpec is the node's spec of a workload's program, its secrets
	// resolved now.
	ExecSpec(ctx context.Context, wl api.Workload) (node.ExecSpec, error)
}

// Events appends to the teams' event logs and wakes the waiters.
type Events interface {
	// Emit appends an event and wakes the waiters; Record appends only.
	Emit(ctx context.Context, teamID, typ, sandboxID, commandID string, data map[string]any)
	Record(ctx context.Context, teamID, typ, sandboxID, commandID string, data map[string]any)
	// Notify wakes the waiters; Changes is closed at the next change.
	Notify()
	Changes() <-chan struct{}
}

// Meter splits a use into hourly accruals.
type Meter interface {
	Hourly(id, teamID string, from, to time.Time, use metering.Use) []store.Accrual
}

// Config is what the workloads take of the server's configuration.
type Config struct {
	DefaultTemplate           string
	Templates                 []string
	DefaultWorkdir            string
	MaxQueuedWorkloadsPerTeam int
	PidsLimit                 int64
	Prices                    api.Prices
	MaxWait                   time.Duration
}

// Deps are the services a Service works through.
type Deps struct {
	Store  Store
	Core   Core
	Images Images
	Events Events
	Meter  Meter
	// Checks are the checks of every new run (runs.Checker).
	Checks runs.Checker
	// Exits routes the node's exit reports; a placed workload registers
	// as the receiver of its program's.
	Exits *runs.Exits
	Log   *slog.Logger
	Now   func() time.Time
}

// Service is the workloads: their queue, placement, runs and charges.
type Service struct {
	cfg    Config
	store  Store
	core   Core
	images Images
	events Events
	meter  Meter
	checks runs.Checker
	exits  *runs.Exits
	log    *slog.Logger
	now    func() time.Time
	// node is set before Run and Recover (SetNode), then only read.
	node Node
	// ctx is the owner's lifecycle: placed workloads run on it, not on a
	// request's context; wg waits for their goroutines (the owner's).
	ctx context.Context
	wg  *sync.WaitGroup
	// kick wakes the queue's owner.
	kick chan struct{}

	// mu serializes the workloads' stored transitions; metered is when
	// the meter last charged each placed workload.
	mu      sync.Mutex
	metered map[string]time.Time

	// runsMu guards placed, the workloads placed on the node.
	runsMu sync.Mutex
	placed map[string]*workloadRun
}

// New returns the workloads service; ctx is its owner's lifecycle, on
// which placed workloads run, and wg the owner's wait for them. It starts
// nothing: the owner runs Run.
func New(ctx context.Context, wg *sync.WaitGroup, cfg Config, d Deps) *Service {
	return &Service{
		cfg: cfg, store: d.Store, core: d.Core, images: d.Images, events: d.Events, meter: d.Meter,
		checks: d.Checks, exits: d.Exits, log: d.Log, now: d.Now, ctx: ctx, wg: wg,
		kick:    make(chan struct{}, 1),
		metered: map[string]time.Time{},
		placed:  map[string]*workloadRun{},
	}
}

// SetNode connects the node; call it before Run and Recover.
func (s *Service) SetNode(n Node) { s.node = n }

func invalid(format string, args ...any) error {
	return api.Errorf(api.CodeInvalidArgument, format, args...)
}

// userReason is what a user may read of an error in a state_reason.
func userReason(err error) string {
	var e *api.Error
	if errors.As(err, &e) && e.Code != api.CodeInternal {
		return e.Message
	}
	return "internal error on the node (the server log has the details)"
}

func rangeError(field, got, lo, hi string) error {
	return &api.Error{
		Code:    api.CodeInvalidArgument,
		Message: fmt.Sprintf("%s is %s; it must be between %s and %s", field, got, lo, hi),
		Details: map[string]any{"field": field, "min": lo, "max": hi},
	}
}
