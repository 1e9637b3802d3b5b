package lifecycle

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/commands"
	"github.com/cove-dev/cove/internal/control/files"
	"github.com/cove-dev/cove/internal/control/imagecatalog"
	"github.com/cove-dev/cove/internal/control/meter"
	"github.com/cove-dev/cove/internal/control/observations"
	"github.com/cove-dev/cove/internal/control/previews"
	"github.com/cove-dev/cove/internal/control/runs"
	"github.com/cove-dev/cove/internal/control/setupcache"
	"github.com/cove-dev/cove/internal/control/teams"
	"github.com/cove-dev/cove/internal/control/templatecatalog"
	"github.com/cove-dev/cove/internal/control/uploads"
	"github.com/cove-dev/cove/internal/control/workloads"
	"github.com/cove-dev/cove/internal/metering"
	"github.com/cove-dev/cove/internal/node"
	"github.com/cove-dev/cove/internal/store"
)

// The core's sides of the interfaces its features declare: small types
// over the core that the wiring (internal/service) builds the feature
// services over (Ports). They read the core's node at each call, since
// the node is connected after New (SetNode).

// Ports are what the feature services are built over.
type Ports struct {
	// Ctx and WG are the core's lifecycle: the workloads' runs go on
	// them (Close cancels and waits).
	Ctx context.Context
	WG  *sync.WaitGroup
	// Clock is the core's clock (UTC).
	Clock func() time.Time
	// Exits routes the node's exit reports to each run's receiver.
	Exits *runs.Exits
	// Checks are the checks of every new run.
	Checks runs.Checker
	// Lifecycle serves the meter and the observations.
	Lifecycle meterLife
	// Node is the node as SetNode connects it (commands, files, assets,
	// uploads, observations).
	Node coreNode
	// Features serve the image and template catalogs and the previews.
	Features featureCore
	// Sandboxes serve the file and asset calls.
	Sandboxes coreSandboxes
	// Workloads serve the workloads service.
	Workloads workloadDeps
	// ImageUploads counts image uploads against the team's image bytes.
	ImageUploads imageUploads
	// Events serve the event log: the sandboxes, the change broadcast,
	// telemetry.
	Events eventDeps
	// Commands, CommandSecrets and CommandTelemetry serve the commands
	// service (with Node).
	Commands         cmdDeps
	CommandSecrets   cmdSecrets
	CommandTelemetry cmdTelemetry
}

// Ports returns the core's sides of its features' interfaces.
func (s *Core) Ports() Ports {
	return Ports{
		Ctx: s.ctx, WG: &s.wg, Clock: func() time.Time { return s.now() },
		Exits: s.exits, Checks: s.checks,
		Lifecycle: meterLife{s}, Node: coreNode{s}, Features: featureCore{s},
		Sandboxes: coreSandboxes{s}, Workloads: workloadDeps{s}, ImageUploads: imageUploads{s},
		Events: eventDeps{s}, Commands: cmdDeps{s}, CommandSecrets: cmdSecrets{s},
		CommandTelemetry: cmdTelemetry{s},
	}
}

// Limits the core's checks share with the feature services.
const (
	MaxEnv          = maxEnv
	MaxEnvValue     = maxEnvValue
	MaxCommandBytes = maxCommandSize
)

// meterLife is the core as the meter's and the observations' Lifecycle.
type meterLife struct{ s *Core }

var (
	_ meter.Lifecycle        = meterLife{}
	_ meter.StatsNode        = meterLife{}
	_ observations.Sandboxes = meterLife{}
)

func (l meterLife) Sandbox(ctx context.Context, teamID, ref string) (api.Sandbox, error) {
	return l.s.GetSandbox(ctx, teamID, ref)
}

func (l meterLife) Sleep(ctx context.Context, teamID, id, reason string) error {
	_, err := l.s.SleepSandbox(ctx, teamID, id, reason)
	return err
}

func (l meterLife) Terminate(ctx context.Context, teamID, id string) error {
	_, err := l.s.TerminateSandbox(ctx, teamID, id)
	return err
}

func (l meterLife) FailSetup(ctx context.Context, sb api.Sandbox, reason string) {
	l.s.failSetup(ctx, sb, reason)
}

func (l meterLife) Emit(ctx context.Context, teamID, typ, sandboxID string, data map[string]any) {
	l.s.svc.Events.Emit(ctx, teamID, typ, sandboxID, "", data)
}

// EmitWorkload appends an event of a workload (its ID in the data).
func (l meterLife) EmitWorkload(ctx context.Context, w api.Workload, typ string, data map[string]any) {
	if data == nil {
		data = map[string]any{}
	}
	data["workload_id"] = w.ID
	l.s.svc.Events.Emit(ctx, w.TeamID, typ, "", "", data)
}

func (l meterLife) MeterWorkloads(ctx context.Context, now time.Time) []api.Workload {
	// Snapshots are charged at the same tick, as storage.
	l.s.meterSnapshots(ctx, now)
	l.s.meterVolumes(ctx, now)
	return l.s.svc.Workloads.Meter(ctx, now)
}

func (l meterLife) CancelTeamWorkloads(ctx context.Context, t api.Team, spent float64) {
	l.s.svc.Workloads.CancelTeam(ctx, t, spent)
}

// Stats reads the node's counters, when the node can.
func (l meterLife) Stats(ctx context.Context, ids []string) map[string]node.Stats {
	if sn, ok := l.s.node.(meter.StatsNode); ok {
		return sn.Stats(ctx, ids)
	}
	return nil
}

// coreNode is the node as SetNode connects it, read at each call.
type coreNode struct{ s *Core }

var (
	_ commands.Node      = coreNode{}
	_ files.Node         = coreNode{}
	_ uploads.DiskHolder = coreNode{}
	_ observations.Node  = coreNode{}
)

func (n coreNode) StatFile(ctx context.Context, sandboxID, path string) (api.FileEntry, error) {
	return n.s.node.StatFile(ctx, sandboxID, path)
}

func (n coreNode) ListFiles(ctx context.Context, sandboxID string, spec node.ListSpec) (api.List[api.FileEntry], error) {
	return n.s.node.ListFiles(ctx, sandboxID, spec)
}

func (n coreNode) ReadFile(ctx context.Context, sandboxID string, spec node.ReadSpec) (*node.Content, error) {
	return n.s.node.ReadFile(ctx, sandboxID, spec)
}

func (n coreNode) WriteFile(ctx context.Context, sandboxID string, spec node.WriteSpec, body io.Reader) (api.FileEntry, bool, error) {
	return n.s.node.WriteFile(ctx, sandboxID, spec, body)
}

func (n coreNode) EditFile(ctx context.Context, sandboxID string, spec node.EditSpec) (api.FileEntry, error) {
	return n.s.node.EditFile(ctx, sandboxID, spec)
}

func (n coreNode) Mkdir(ctx context.Context, sandboxID string, spec node.MkdirSpec) (api.FileEntry, error) {
	return n.s.node.Mkdir(ctx, sandboxID, spec)
}

func (n coreNode) MoveFile(ctx context.Context, sandboxID string, spec node.MoveSpec) (api.FileEntry, error) {
	return n.s.node.MoveFile(ctx, sandboxID, spec)
}

func (n coreNode) RemoveFile(ctx context.Context, sandboxID, path string, recursive bool) error {
	return n.s.node.RemoveFile(ctx, sandboxID, path, recursive)
}

func (n coreNode) ReadArchive(ctx context.Context, sandboxID, path string) (io.ReadCloser, error) {
	return n.s.node.ReadArchive(ctx, sandboxID, path)
}

func (n coreNode) WatchFiles(ctx context.Context, sandboxID string, spec node.WatchSpec) (node.FileWatch, error) {
	return n.s.node.WatchFiles(ctx, sandboxID, spec)
}

func (n coreNode) WriteArchive(ctx context.Context, sandboxID string, spec node.ArchiveSpec, body io.Reader) (api.ArchiveResult, error) {
	return n.s.node.WriteArchive(ctx, sandboxID, spec, body)
}

// HoldDisk counts an upload's bytes on a node that counts them
// (internal/node/local); other nodes hold nothing.
func (n coreNode) HoldDisk(key string, bytes int64) error {
	if h, ok := n.s.node.(uploads.DiskHolder); ok {
		return h.HoldDisk(key, bytes)
	}
	return nil
}

func (n coreNode) Exec(ctx context.Context, sandboxID string, spec node.ExecSpec) (node.Started, error) {
	return n.s.node.Exec(ctx, sandboxID, spec)
}
func (n coreNode) Output(sandboxID, commandID string) (node.Output, error) {
	return n.s.node.Output(sandboxID, commandID)
}
func (n coreNode) Stdin(ctx context.Context, sandboxID, commandID string, r io.Reader, eof bool) error {
	return n.s.node.Stdin(ctx, sandboxID, commandID, r, eof)
}
func (n coreNode) Signal(ctx context.Context, sandboxID, commandID, sig string) error {
	return n.s.node.Signal(ctx, sandboxID, commandID, sig)
}
func (n coreNode) Resize(ctx context.Context, sandboxID, commandID string, size node.TermSize) error {
	return n.s.node.Resize(ctx, sandboxID, commandID, size)
}

func (n coreNode) DrainObservations() []node.Observation { return n.s.node.DrainObservations() }

func (n coreNode) PendingObservations(id string) []api.NetworkObservation {
	return n.s.node.PendingObservations(id)
}

// coreSandboxes is what the file and asset services ask of the core.
type coreSandboxes struct{ s *Core }

func (c coreSandboxes) LiveSandbox(ctx context.Context, teamID, ref string, wake bool) (api.Sandbox, error) {
	return c.s.LiveSandbox(ctx, teamID, ref, wake)
}

func (c coreSandboxes) ActiveSandbox(ctx context.Context, teamID, ref string) (api.Sandbox, error) {
	return c.s.activeSandbox(ctx, teamID, ref)
}

func (c coreSandboxes) DeliverUpload(ctx context.Context, sb api.Sandbox, req files.ArchiveUpload, body io.Reader) (api.ArchiveResult, error) {
	return c.s.deliverUpload(ctx, sb, ArchiveUpload(req), body)
}

func (c coreSandboxes) DefaultUser(sb api.Sandbox) node.User { return c.s.svc.Images.DefaultUser(sb) }

// featureCore is what the image and template catalogs and the previews
// ask of the core.
type featureCore struct{ s *Core }

var (
	_ imagecatalog.Admission    = featureCore{}
	_ imagecatalog.Events       = featureCore{}
	_ imagecatalog.Uploads      = featureCore{}
	_ imagecatalog.Workloads    = featureCore{}
	_ imagecatalog.Validator    = featureCore{}
	_ templatecatalog.Admission = featureCore{}
	_ previews.Lifecycle        = featureCore{}
)

func (c featureCore) RequireAdmission(ctx context.Context, teamID, flag string) error {
	return c.s.svc.Teams.RequireAdmission(ctx, teamID, flag)
}

func (c featureCore) Admits(t api.Team, flag string) bool {
	return teams.Has(teams.Effective(t), flag)
}

func (c featureCore) Emit(ctx context.Context, teamID, typ string, data map[string]any) {
	c.s.svc.Events.Emit(ctx, teamID, typ, "", "", data)
}

func (c featureCore) SpoolImage(ctx context.Context, teamID string, body io.Reader, max int64) (*os.File, func(), error) {
	sp, done, err := c.s.spoolUpload(ctx, teamID, imageUploads{c.s}, body, max, "", nil, "image archive")
	if err != nil {
		return nil, nil, err
	}
	return sp.File, done, nil
}

func (c featureCore) RefuseImageDelete(ctx context.Context, img api.Image, owner string) error {
	return c.s.svc.Workloads.RefuseImage(ctx, img, owner)
}

func (c featureCore) Name(name string) error { return validateName(name) }

func (c featureCore) Resources(r *api.ResourcesRequest) error {
	_, err := c.s.cfg.resolveResources(r)
	return err
}

func (c featureCore) Policy(field string, allow []string) ([]string, error) {
	return checkPolicy(field, allow)
}

func (c featureCore) LockSandbox(ctx context.Context, teamID, ref string) (api.Sandbox, func(), error) {
	sb, o, err := c.s.lockSandbox(ctx, teamID, ref)
	if err != nil {
		return sb, nil, err
	}
	return sb, o.mu.Unlock, nil
}

func (c featureCore) GetSandbox(ctx context.Context, teamID, ref string) (api.Sandbox, error) {
	return c.s.GetSandbox(ctx, teamID, ref)
}

func (c featureCore) LiveSandbox(ctx context.Context, teamID, ref string, wake bool) (api.Sandbox, error) {
	return c.s.LiveSandbox(ctx, teamID, ref, wake)
}

func (c featureCore) Touch(sandboxID string) { c.s.limits.touch(sandboxID, c.s.now()) }

// imageUploads counts image uploads against the team's image bytes.
type imageUploads struct{ s *Core }

var _ uploads.Kind = imageUploads{}

func (k imageUploads) Cap() int64 { return k.s.cfg.MaxImageBytesPerTeam }

func (k imageUploads) Stored(ctx context.Context, teamID string) (int64, error) {
	return k.s.svc.Images.TeamBytes(ctx, teamID)
}

func (k imageUploads) Full(used, limit int64) error {
	return &api.Error{
		Code: api.CodeInsufficientStorage,
		Message: fmt.Sprintf("the team's images and image uploads use %d of its %d bytes; delete images (DELETE /v1/images/{id}) to make room; nothing was kept",
			used, limit),
		Details: map[string]any{"used_bytes": used, "limit_bytes": limit},
	}
}

// workloadDeps is what the core does for the workloads service.
type workloadDeps struct{ s *Core }

var (
	_ workloads.Core   = workloadDeps{}
	_ workloads.Images = workloadDeps{}
	_ workloads.Events = workloadDeps{}
	_ workloads.Meter  = workloadDeps{}
)

// Resolve resolves a workload's image as a sandbox's: its defaults are
// those of a sandbox of it.
func (d workloadDeps) Resolve(ctx context.Context, teamID string, req *api.CreateWorkloadRequest) (*api.Image, *api.ResourcesRequest, func(), error) {
	rr := &api.ResourcesRequest{}
	if r := req.Resources; r != nil {
		rr.CPUs, rr.MemoryMiB, rr.DiskMiB = r.CPUs, r.MemoryMiB, r.DiskMiB
	}
	name := req.Image
	if name == "" {
		name = req.Template
	}
	if name == "" {
		return nil, rr, func() {}, nil
	}
	sr := api.CreateSandboxRequest{Template: name, Resources: rr}
	img, release, err := d.s.svc.Images.Use(ctx, teamID, &sr)
	if err != nil {
		return nil, nil, nil, err
	}
	if req.Workdir == "" {
		req.Workdir = sr.Workdir
	}
	return img, sr.Resources, release, nil
}

func (d workloadDeps) Exists(teamID, tmpl string) bool {
	_, ok := d.s.svc.Images.Image(teamID, tmpl)
	return ok
}

func (d workloadDeps) NodeTemplate(teamID, tmpl string) string {
	return d.s.svc.Images.NodeTemplate(teamID, tmpl)
}

func (d workloadDeps) DefaultUser(teamID, tmpl string) node.User {
	return d.s.svc.Images.DefaultUser(api.Sandbox{TeamID: teamID, Template: tmpl})
}

func (d workloadDeps) ResolveResources(r *api.ResourcesRequest) (api.Resources, error) {
	return d.s.cfg.resolveResources(r)
}

func (d workloadDeps) CheckSource(src *api.Source) (*api.Source, error) {
	if src != nil && src.Type == api.SourceSnapshot {
		return nil, invalid("source type snapshot is for sandboxes; a workload takes empty, upload, asset or git")
	}
	return runs.CheckSource(src, d.s.secrets != nil)
}

func (d workloadDeps) AllocRange(ctx context.Context, id string) (node.IDRange, error) {
	return d.s.ranges.Alloc(ctx, id)
}

func (d workloadDeps) ReleaseRange(ctx context.Context, id string) { d.s.ranges.Release(ctx, id) }

func (d workloadDeps) LandAsset(ctx context.Context, teamID, targetID, dir, assetID string, owner node.User) (string, error) {
	return d.s.svc.Assets.Land(ctx, teamID, targetID, dir, assetID, owner)
}

func (d workloadDeps) CloneSource(ctx context.Context, teamID, targetID, dir string, src api.Source, owner node.User) (string, error) {
	return d.s.cloneSource().Clone(ctx, teamID, targetID, dir, src, owner)
}

// ExecSpec is a workload's program as a command of its container
// (command ID = workload ID), built from its runs.Spec by the commands
// service, its secrets resolved now.
func (d workloadDeps) ExecSpec(ctx context.Context, wl api.Workload) (node.ExecSpec, error) {
	return d.s.svc.Commands.Program(ctx, wl.ID, workloads.Run(wl))
}

func (d workloadDeps) Emit(ctx context.Context, teamID, typ, sandboxID, commandID string, data map[string]any) {
	d.s.svc.Events.Emit(ctx, teamID, typ, sandboxID, commandID, data)
}

func (d workloadDeps) Record(ctx context.Context, teamID, typ, sandboxID, commandID string, data map[string]any) {
	d.s.svc.Events.Record(ctx, teamID, typ, sandboxID, commandID, data)
}

func (d workloadDeps) Notify()                  { d.s.notify() }
func (d workloadDeps) Changes() <-chan struct{} { return d.s.changes() }

func (d workloadDeps) Hourly(id, teamID string, from, to time.Time, use metering.Use) []store.Accrual {
	return d.s.svc.Meter.Hourly(id, teamID, from, to, use)
}

// setupCore is what the setup cache asks of the core.
type setupCore struct{ s *Core }

var _ setupcache.Core = setupCore{}

func (c setupCore) StartSpec(ctx context.Context, sb api.Sandbox) (node.SandboxSpec, error) {
	return c.s.startSpec(ctx, sb)
}

func (c setupCore) LoseCommands(ctx context.Context, sandboxID string) {
	c.s.loseCommands(ctx, sandboxID)
}
