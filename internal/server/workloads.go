package server

import (
	"context"
	"fmt"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/workloads"
	"github.com/cove-dev/cove/internal/metering"
	"github.com/cove-dev/cove/internal/node"
	"github.com/cove-dev/cove/internal/store"
)

// Workloads (batch runs: their queue, GPU placement, runs and charges)
// are internal/control/workloads; the core gives that service what it
// needs of the lifecycle (workloadDeps) and delegates to it here.

// GPUNode is a node's optional ability to advertise its GPUs; a node
// without it has none.
type GPUNode = workloads.GPUNode

// newWorkloads builds the workloads service over the core.
func (s *Server) newWorkloads() *workloads.Service {
	d := workloadDeps{s}
	return workloads.New(s.ctx, &s.wg, workloads.Config{
		DefaultTemplate: s.cfg.DefaultTemplate, Templates: s.cfg.Templates, DefaultWorkdir: s.cfg.DefaultWorkdir,
		MaxQueuedWorkloadsPerTeam: s.cfg.MaxQueuedWorkloadsPerTeam, PidsLimit: s.cfg.PidsLimit,
		Prices: s.cfg.Prices, MaxWait: s.cfg.MaxWait,
	}, workloads.Deps{
		Store: s.store, Core: d, Images: d, Events: d, Meter: d, Checks: s.checker(), Exits: s.exits,
		Log: s.log, Now: func() time.Time { return s.now() },
	})
}

// Workloads is the workloads service (httpapi's Workloads).
func (s *Server) Workloads() *workloads.Service { return s.wl }

// refuseSandboxGPUs answers a sandbox request for GPUs: sandboxes run on
// the CPU-based managed environment; GPU code runs as a workload.
func refuseSandboxGPUs(req api.CreateSandboxRequest) error {
	if req.Resources == nil || req.Resources.GPUs == 0 {
		return nil
	}
	if req.Resources.GPUs < 0 {
		return invalid("resources.gpus is negative")
	}
	return &api.Error{
		Code: api.CodeUnprocessable,
		Message: fmt.Sprintf("sandboxes run on the managed environment, which is CPU-based: they get no GPUs. "+
			"Submit GPU code as a workload instead: POST /v1/workloads with {\"command\": \"…\", \"resources\": {\"gpus\": %d}} "+
			"(CLI: cove workloads submit --gpus %d -- COMMAND…); it is queued until a node with GPUs can run it", req.Resources.GPUs, req.Resources.GPUs),
		Details: map[string]any{"field": "resources.gpus", "use": "POST /v1/workloads"},
	}
}

// GPUHealth is what the node advertises of its GPUs, and how many placed
// workloads hold (GET /healthz).
func (s *Server) GPUHealth() api.GPUHealth { return s.wl.GPUHealth() }

// SubmitWorkload validates and stores a workload, queued.
func (s *Server) SubmitWorkload(ctx context.Context, teamID string, req api.CreateWorkloadRequest) (api.Workload, error) {
	return s.wl.SubmitWorkload(ctx, teamID, req)
}

// GetWorkload returns a workload of the team.
func (s *Server) GetWorkload(ctx context.Context, teamID, wid string) (api.Workload, error) {
	return s.wl.GetWorkload(ctx, teamID, wid)
}

// WorkloadQuery selects a page of a team's workloads, oldest first.
type WorkloadQuery = workloads.Query

// ListWorkloads lists a page of the team's workloads.
func (s *Server) ListWorkloads(ctx context.Context, teamID string, q WorkloadQuery) (api.List[api.Workload], error) {
	return s.wl.ListWorkloads(ctx, teamID, q)
}

// WaitWorkload returns the workload once it is in state want or has
// ended, or as it is when timeout passes.
func (s *Server) WaitWorkload(ctx context.Context, teamID, wid string, want api.WorkloadState, timeout time.Duration) (api.Workload, error) {
	return s.wl.WaitWorkload(ctx, teamID, wid, want, timeout)
}

// CancelWorkload cancels a workload.
func (s *Server) CancelWorkload(ctx context.Context, teamID, wid string) (api.Workload, error) {
	return s.wl.CancelWorkload(ctx, teamID, wid)
}

// WorkloadOutput returns a workload's recorded output; the caller closes it.
func (s *Server) WorkloadOutput(ctx context.Context, teamID, wid string) (api.Workload, node.Output, error) {
	return s.wl.WorkloadOutput(ctx, teamID, wid)
}

// meterWorkloads charges the placed workloads up to now (the meter).
func (s *Server) meterWorkloads(ctx context.Context, now time.Time) []api.Workload {
	return s.wl.Meter(ctx, now)
}

// cancelTeamWorkloads cancels a team's workloads at its spend limit.
func (s *Server) cancelTeamWorkloads(ctx context.Context, t api.Team, spent float64) {
	s.wl.CancelTeam(ctx, t, spent)
}

// refuseImageOfWorkloads refuses deleting an image live workloads use.
func (s *Server) refuseImageOfWorkloads(ctx context.Context, img api.Image, owner string) error {
	return s.wl.RefuseImage(ctx, img, owner)
}

// recoverWorkloads reattaches or requeues the placed workloads at Recover.
func (s *Server) recoverWorkloads(ctx context.Context) (map[string]bool, error) {
	return s.wl.Recover(ctx)
}

// workloadDeps is what the core does for the workloads service.
type workloadDeps struct{ s *Server }

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
	img, release, err := d.s.useImage(ctx, teamID, &sr)
	if err != nil {
		return nil, nil, nil, err
	}
	if req.Workdir == "" {
		req.Workdir = sr.Workdir
	}
	return img, sr.Resources, release, nil
}

func (d workloadDeps) Exists(teamID, tmpl string) bool {
	_, ok := d.s.image(teamID, tmpl)
	return ok
}

func (d workloadDeps) NodeTemplate(teamID, tmpl string) string { return d.s.nodeTemplate(teamID, tmpl) }

func (d workloadDeps) DefaultUser(teamID, tmpl string) node.User {
	return d.s.defaultUser(api.Sandbox{TeamID: teamID, Template: tmpl})
}

func (d workloadDeps) ResolveResources(r *api.ResourcesRequest) (api.Resources, error) {
	return d.s.cfg.resolveResources(r)
}

func (d workloadDeps) CheckSource(src *api.Source) (*api.Source, error) { return d.s.checkSource(src) }

func (d workloadDeps) AllocRange(ctx context.Context, id string) (node.IDRange, error) {
	return d.s.allocRange(ctx, id)
}

func (d workloadDeps) ReleaseRange(ctx context.Context, id string) { d.s.releaseRange(ctx, id) }

func (d workloadDeps) LandAsset(ctx context.Context, teamID, targetID, dir, assetID string, owner node.User) (string, error) {
	return d.s.landAsset(ctx, teamID, targetID, dir, assetID, owner)
}

func (d workloadDeps) CloneSource(ctx context.Context, teamID, targetID, dir string, src api.Source, owner node.User) (string, error) {
	return d.s.cloneSource(ctx, teamID, targetID, dir, src, owner)
}

// ExecSpec is a workload's program as a command of its container
// (command ID = workload ID), built from its runs.Spec by the commands
// service, its secrets resolved now.
func (d workloadDeps) ExecSpec(ctx context.Context, wl api.Workload) (node.ExecSpec, error) {
	return d.s.commands.Program(ctx, wl.ID, workloads.Run(wl))
}

func (d workloadDeps) Emit(ctx context.Context, teamID, typ, sandboxID, commandID string, data map[string]any) {
	d.s.emit(ctx, teamID, typ, sandboxID, commandID, data)
}

func (d workloadDeps) Record(ctx context.Context, teamID, typ, sandboxID, commandID string, data map[string]any) {
	d.s.record(ctx, teamID, typ, sandboxID, commandID, data)
}

func (d workloadDeps) Notify()                  { d.s.notify() }
func (d workloadDeps) Changes() <-chan struct{} { return d.s.changes() }

func (d workloadDeps) Hourly(id, teamID string, from, to time.Time, use metering.Use) []store.Accrual {
	return d.s.hourly(id, teamID, from, to, use)
}

// emitWorkload appends an event of a workload (its ID in the data).
func (s *Server) emitWorkload(ctx context.Context, wl api.Workload, typ string, data map[string]any) {
	if data == nil {
		data = map[string]any{}
	}
	data["workload_id"] = wl.ID
	s.emit(ctx, wl.TeamID, typ, "", "", data)
}
