package workloads

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/page"
	"github.com/cove-dev/cove/internal/control/runs"
	"github.com/cove-dev/cove/internal/id"
	"github.com/cove-dev/cove/internal/node"
	"github.com/cove-dev/cove/internal/store"
)

const (
	defaultWorkloadTimeoutS = 3600
	defaultMaxQueueS        = 3600
	// queueTick is how often the queue is looked at without a kick: for
	// max_queue_s, and for room freed on the node by others.
	queueTick = time.Second
)

// workloadRun is what the server holds of a workload it placed.
type workloadRun struct {
	cancel context.CancelFunc
	exit   chan workloadExit // buffered: the node's exit report
	done   chan struct{}     // closed when its goroutine has cleaned up
	// unregister ends its registration as its program's exit receiver.
	unregister func()
}

type workloadExit struct {
	exit node.Exit
	lost bool
}

func (s *Service) nodeGPUs() node.GPUs {
	if g, ok := s.node.(GPUNode); ok {
		return g.GPUs()
	}
	return node.GPUs{}
}

// GPUHealth is what the node advertises of its GPUs, and how many placed
// workloads hold (GET /healthz).
func (s *Service) GPUHealth() api.GPUHealth {
	g := s.nodeGPUs()
	h := api.GPUHealth{Type: g.Type, Count: len(g.Names)}
	if held, err := s.heldGPUs(s.ctx); err == nil {
		h.InUse = len(held)
	}
	return h
}

// SubmitWorkload validates and stores a workload, queued; the queue's
// owner places it.
func (s *Service) SubmitWorkload(ctx context.Context, teamID string, req api.CreateWorkloadRequest) (api.Workload, error) {
	if err := page.Scoped(teamID); err != nil {
		return api.Workload{}, err
	}
	wid := id.For(ctx, "wl")
	if id.Resumed(ctx) {
		// The ID is derived from an Idempotency-Key whose claim this
		// attempt took over: a second attempt of the request (its first
		// on a replica that died) answers the workload the first attempt queued.
		// A first attempt's derived ID is new: nothing to look for.
		if wl, err := s.store.GetWorkload(ctx, teamID, wid); err == nil {
			return wl, nil
		} else if api.ErrorCode(err) != api.CodeNotFound {
			return api.Workload{}, err
		}
	}
	img, rr, release, err := s.images.Resolve(ctx, teamID, &req)
	if err != nil {
		return api.Workload{}, err
	}
	// Held until the workload is stored: a delete of the image waits,
	// then sees it queued.
	defer release()
	run, wl, err := s.newWorkload(wid, teamID, req, img, rr)
	if err != nil {
		return api.Workload{}, err
	}
	if err := s.checks.Check(ctx, run); err != nil {
		return api.Workload{}, err
	}
	wl.StateReason = "waiting for a node to place it"
	if err := s.enqueue(ctx, wl); err != nil {
		return api.Workload{}, err
	}
	s.log.Info("workload queued", "workload", wl.ID, "team", teamID, "gpus", wl.Resources.GPUs)
	s.emitWorkload(ctx, wl, "workload.queued", map[string]any{"gpus": wl.Resources.GPUs})
	s.kickQueue()
	return wl, nil
}

// enqueue stores a new workload, queued, unless its team has
// MaxQueuedWorkloadsPerTeam queued already. The count and the store are
// one step under wlMu, so submits at once cannot pass the cap together.
func (s *Service) enqueue(ctx context.Context, wl api.Workload) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	limit := s.cfg.MaxQueuedWorkloadsPerTeam
	queued, err := s.store.ListWorkloads(ctx, store.WorkloadFilter{TeamID: wl.TeamID, States: []api.WorkloadState{api.WorkloadQueued}, Limit: limit})
	if err != nil {
		return fmt.Errorf("count queued workloads of %s: %w", wl.TeamID, err)
	}
	if len(queued) >= limit {
		return &api.Error{
			Code: api.CodeResourceExhausted,
			Message: fmt.Sprintf("your team has %d workloads queued, the most this server queues per team; "+
				"submit again once some are placed or ended (GET /v1/workloads?state=queued lists them; POST /v1/workloads/{id}/cancel drops one)", limit),
			Details: map[string]any{"limit": limit, "queued": len(queued)},
		}
	}
	return s.store.CreateWorkload(ctx, wl)
}

// newWorkload validates a workload request (its image resolved, rr its
// resources asked for) and returns its run and the workload to store.
func (s *Service) newWorkload(wid, teamID string, req api.CreateWorkloadRequest, img *api.Image, rr *api.ResourcesRequest) (runs.Spec, api.Workload, error) {
	var run runs.Spec
	tmpl := req.Template
	switch {
	case req.Image != "" && req.Template != "" && req.Image != req.Template:
		return run, api.Workload{}, invalid("give template or image, not both")
	case req.Image != "":
		// An image is used by its name, as a template.
		tmpl = req.Image
	case tmpl == "":
		tmpl = s.cfg.DefaultTemplate
	}
	if !slices.Contains(s.cfg.Templates, tmpl) && !s.images.Exists(teamID, tmpl) {
		return run, api.Workload{}, invalid("template %q does not exist; use %q (GET /v1/templates lists them)", tmpl, s.cfg.DefaultTemplate)
	}
	res, err := s.core.ResolveResources(rr)
	if err != nil {
		return run, api.Workload{}, err
	}
	run = runs.Spec{
		Kind: runs.Workload, TeamID: teamID, Template: tmpl, Image: img, Resources: res,
		Command: req.Command, Argv: req.Argv, Env: req.Env, Secrets: req.Secrets, User: req.User,
		Workdir: s.cfg.DefaultWorkdir, Network: api.NetworkPolicy{Allow: []string{}},
	}
	if r := req.Resources; r != nil {
		run.GPUs, run.GPUType = r.GPUs, r.GPUType
	}
	if req.TimeoutS != nil {
		run.TimeoutS = *req.TimeoutS
	}
	if req.Workdir != "" {
		if run.Workdir, err = runs.CheckPath("workdir", req.Workdir); err != nil {
			return run, api.Workload{}, err
		}
		if run.Workdir == "/" {
			return run, api.Workload{}, invalid("workdir cannot be /")
		}
	}
	if err := run.Validate(); err != nil {
		return run, api.Workload{}, err
	}
	if err := runs.CheckEnv("env", req.Env); err != nil {
		return run, api.Workload{}, err
	}
	if run.User == "" {
		run.User = "user"
	}
	if err := runs.CheckLabels(req.Labels); err != nil {
		return run, api.Workload{}, err
	}
	if req.Source != nil && req.Source.Type == api.SourceUpload {
		return run, api.Workload{}, invalid("source type upload is for sandboxes; save the folder as an asset (POST /v1/assets) and give source type asset")
	}
	if run.Source, err = s.core.CheckSource(req.Source); err != nil {
		return run, api.Workload{}, err
	}
	if run.TimeoutS == 0 {
		run.TimeoutS = defaultWorkloadTimeoutS
	}
	queue := int64(defaultMaxQueueS)
	if req.MaxQueueS != nil {
		if queue = *req.MaxQueueS; queue < 1 || queue > runs.MaxTimeoutS {
			return run, api.Workload{}, rangeError("max_queue_s", fmt.Sprint(queue), "1", fmt.Sprint(runs.MaxTimeoutS))
		}
	}
	wl := api.Workload{
		ID: wid, TeamID: teamID, Template: tmpl,
		Command: run.Command, Argv: run.Argv, Source: run.Source, Env: run.Env, Secrets: run.Secrets,
		Workdir: run.Workdir, User: run.User,
		Resources: api.WorkloadResources{CPUs: res.CPUs, MemoryMiB: res.MemoryMiB, DiskMiB: res.DiskMiB, GPUs: run.GPUs, GPUType: run.GPUType},
		TimeoutS:  run.TimeoutS, MaxQueueS: queue, Labels: req.Labels,
		State: api.WorkloadQueued, Devices: []string{}, CreatedAt: s.now(),
	}
	if wl.Labels == nil {
		wl.Labels = map[string]string{}
	}
	return run, wl, nil
}

func (s *Service) emitWorkload(ctx context.Context, wl api.Workload, typ string, data map[string]any) {
	if data == nil {
		data = map[string]any{}
	}
	data["workload_id"] = wl.ID
	s.events.Emit(ctx, wl.TeamID, typ, "", "", data)
}

// kickQueue asks the queue's owner to look at the queue now.
func (s *Service) kickQueue() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// Run is the queue's one owner: it places queued workloads, oldest
// first, when kicked and every queueTick. It returns when ctx ends.
func (s *Service) Run(ctx context.Context) {
	t := time.NewTicker(queueTick)
	defer t.Stop()
	for {
		s.placeQueued(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.kick:
		}
	}
}

// placeQueued looks at every queued workload once: it starts those the
// node can place, fails those queued past max_queue_s, and keeps the
// others' state_reason saying what they wait for.
func (s *Service) placeQueued(ctx context.Context) {
	queued, err := s.store.ListWorkloads(ctx, store.WorkloadFilter{States: []api.WorkloadState{api.WorkloadQueued}})
	if err != nil {
		s.log.Error("list queued workloads", "err", err)
		return
	}
	if len(queued) == 0 {
		return
	}
	gpus := s.nodeGPUs()
	held, err := s.heldGPUs(ctx)
	if err != nil {
		s.log.Error("list placed workloads", "err", err)
		return
	}
	// A team at its monthly spend limit places nothing: its queued
	// workloads are cancelled (once per team and look).
	refused := map[string]error{}
	for _, wl := range queued {
		if ctx.Err() != nil {
			return
		}
		refusal, ok := refused[wl.TeamID]
		if !ok {
			refusal = s.checks.Budgets.TeamRefusal(ctx, wl.TeamID)
			refused[wl.TeamID] = refusal
		}
		if refusal != nil {
			var e *api.Error
			if errors.As(refusal, &e) && e.Code == api.CodeBudgetExceeded {
				spent, _ := e.Details["cost_usd"].(float64)
				limit, _ := e.Details["spend_limit_usd"].(float64)
				s.cancelForBudget(ctx, wl, spent, limit)
			} else {
				s.log.Error("check the team's spend before placing", "workload", wl.ID, "err", refusal)
			}
			continue
		}
		devices, reason := placeGPUs(wl.Resources, gpus, held)
		if reason == "" {
			if err := s.node.Admit(ctx, s.workloadSpec(wl)); err != nil {
				reason = "waiting for room on the node: " + userReason(err)
			}
		}
		if reason == "" {
			for _, d := range devices {
				held[d] = true
			}
			s.place(ctx, wl, devices)
			continue
		}
		if !s.now().Before(wl.CreatedAt.Add(time.Duration(wl.MaxQueueS) * time.Second)) {
			s.endQueued(ctx, wl.TeamID, wl.ID, api.WorkloadFailed,
				fmt.Sprintf("no node could place it within max_queue_s (%d s): %s", wl.MaxQueueS, reason), "workload.failed")
			continue
		}
		if wl.StateReason != reason {
			s.updateWorkload(ctx, wl.TeamID, wl.ID, func(w *api.Workload) bool {
				if w.State != api.WorkloadQueued {
					return false
				}
				w.StateReason = reason
				return true
			})
		}
	}
}

// heldGPUs are the devices of workloads placed on the node.
func (s *Service) heldGPUs(ctx context.Context) (map[string]bool, error) {
	placed, err := s.store.ListWorkloads(ctx, store.WorkloadFilter{States: []api.WorkloadState{api.WorkloadStarting, api.WorkloadRunning}})
	if err != nil {
		return nil, err
	}
	held := map[string]bool{}
	for _, w := range placed {
		for _, d := range w.Devices {
			held[d] = true
		}
	}
	return held, nil
}

// placeGPUs chooses the GPUs of a workload among the node's free ones,
// or says why it cannot be placed now.
func placeGPUs(r api.WorkloadResources, gpus node.GPUs, held map[string]bool) ([]string, string) {
	if r.GPUs == 0 {
		return nil, ""
	}
	if len(gpus.Names) == 0 {
		return nil, fmt.Sprintf("waiting for a node with %d GPU(s): no node has GPUs (nodes find them through CDI specs, e.g. nvidia-ctk cdi generate)", r.GPUs)
	}
	if r.GPUType != "" && r.GPUType != gpus.Type {
		return nil, fmt.Sprintf("waiting for a node with GPUs of type %s: the node has %s", r.GPUType, gpus.Type)
	}
	if len(gpus.Names) < r.GPUs {
		return nil, fmt.Sprintf("waiting for a node with %d GPU(s): the node has %d", r.GPUs, len(gpus.Names))
	}
	var free []string
	for _, n := range gpus.Names {
		if !held[n] {
			free = append(free, n)
		}
	}
	if len(free) < r.GPUs {
		return nil, fmt.Sprintf("waiting for %d GPU(s) to be free: %d of %d are in use", r.GPUs, len(gpus.Names)-len(free), len(gpus.Names))
	}
	return free[:r.GPUs], ""
}

// workloadSpec is what the node starts for a workload: a sandbox's
// container with the workload's resources, no network (an empty policy
// behind the fence) and its GPUs.
func (s *Service) workloadSpec(wl api.Workload) node.SandboxSpec {
	return node.SandboxSpec{
		ID: wl.ID, Hostname: wl.ID, Template: s.images.NodeTemplate(wl.TeamID, wl.Template),
		Resources: api.Resources{CPUs: wl.Resources.CPUs, MemoryMiB: wl.Resources.MemoryMiB, DiskMiB: wl.Resources.DiskMiB},
		Pids:      s.cfg.PidsLimit, Workdir: wl.Workdir,
		Network: api.NetworkPolicy{Allow: []string{}}, Devices: wl.Devices,
	}
}

// place marks a workload starting with its devices and runs it.
func (s *Service) place(ctx context.Context, wl api.Workload, devices []string) {
	placed, ok := s.updateWorkload(ctx, wl.TeamID, wl.ID, func(w *api.Workload) bool {
		if w.State != api.WorkloadQueued {
			return false
		}
		t := s.now()
		w.State, w.StateReason, w.Devices, w.PlacedAt = api.WorkloadStarting, "", append([]string{}, devices...), &t
		return true
	})
	if !ok {
		return
	}
	runCtx, cancel := context.WithCancel(s.ctx)
	run := s.newRun(wl.ID, cancel)
	s.wg.Go(func() {
		defer cancel()
		s.runWorkload(runCtx, placed, run)
	})
}

// newRun holds a placed workload's run and registers it as the receiver
// of its program's exit.
func (s *Service) newRun(id string, cancel context.CancelFunc) *workloadRun {
	run := &workloadRun{cancel: cancel, exit: make(chan workloadExit, 1), done: make(chan struct{})}
	run.unregister = s.exits.Register(id, run)
	s.runsMu.Lock()
	s.placed[id] = run
	s.runsMu.Unlock()
	return run
}

func (s *Service) dropRun(id string) {
	s.runsMu.Lock()
	run := s.placed[id]
	if run != nil {
		close(run.done)
	}
	delete(s.placed, id)
	s.runsMu.Unlock()
	if run != nil {
		run.unregister()
	}
}

// runWorkload starts a placed workload's container, lands its source,
// starts its program and waits for its end. A cancel (ctx) removes the
// container; the cancel itself recorded the state.
func (s *Service) runWorkload(ctx context.Context, wl api.Workload, run *workloadRun) {
	defer s.dropRun(wl.ID)
	pctx := context.WithoutCancel(ctx)
	spec := s.workloadSpec(wl)
	ids, err := s.core.AllocRange(ctx, wl.ID)
	if err == nil {
		spec.IDs = ids
		err = s.node.Start(ctx, spec)
	}
	if err == nil {
		err = s.landWorkloadSource(ctx, wl)
	}
	if err == nil {
		err = s.execWorkload(ctx, wl)
	}
	if err != nil {
		s.cleanupWorkload(pctx, wl.ID)
		if ctx.Err() == nil {
			s.log.Warn("workload start failed", "workload", wl.ID, "err", err)
			s.finishWorkload(pctx, wl, api.WorkloadFailed, "start failed: "+userReason(err), nil)
		}
		return
	}
	s.waitWorkload(ctx, wl, run)
}

// waitWorkload waits for a running workload's exit (or its cancel) and
// records its end.
func (s *Service) waitWorkload(ctx context.Context, wl api.Workload, run *workloadRun) {
	pctx := context.WithoutCancel(ctx)
	select {
	case <-ctx.Done():
		if s.ctx.Err() != nil {
			// The server stops: the workload runs on and the next
			// Recover reattaches it.
			return
		}
		// Cancelled: the cancel recorded the state.
		s.cleanupWorkload(pctx, wl.ID)
	case e := <-run.exit:
		s.cleanupWorkload(pctx, wl.ID)
		state, reason := api.WorkloadExited, ""
		switch {
		case e.lost:
			state, reason = api.WorkloadFailed, "the workload's container stopped before its program ended"
		case e.exit.TimedOut:
			state, reason = api.WorkloadFailed, fmt.Sprintf("killed at its timeout (timeout_s %d)", wl.TimeoutS)
		case e.exit.Signal != "":
			state, reason = api.WorkloadFailed, "killed by SIG"+e.exit.Signal
		}
		s.finishWorkload(pctx, wl, state, reason, &e)
	}
}

// cleanupWorkload removes a workload's container, keeping its recorded
// output, and frees its ID range.
func (s *Service) cleanupWorkload(ctx context.Context, id string) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := s.node.DestroyRuntime(ctx, id); err != nil {
		s.log.Error("remove workload container", "workload", id, "err", err)
		return
	}
	s.core.ReleaseRange(ctx, id)
}

func (s *Service) landWorkloadSource(ctx context.Context, wl api.Workload) error {
	src := wl.Source
	if src == nil {
		return nil
	}
	var digest string
	var err error
	switch src.Type {
	case api.SourceAsset:
		digest, err = s.core.LandAsset(ctx, wl.TeamID, wl.ID, wl.Workdir, src.AssetID, s.images.DefaultUser(wl.TeamID, wl.Template))
	case api.SourceGit:
		digest, err = s.core.CloneSource(ctx, wl.TeamID, wl.ID, wl.Workdir, *src, s.images.DefaultUser(wl.TeamID, wl.Template))
	default:
		return nil
	}
	if err != nil {
		return err
	}
	s.updateWorkload(ctx, wl.TeamID, wl.ID, func(w *api.Workload) bool {
		if w.Source == nil {
			return false
		}
		w.Source.Digest = digest
		return true
	})
	return nil
}

// execWorkload starts the workload's program as the one recorded command
// of its container (command ID = workload ID) and marks it running.
func (s *Service) execWorkload(ctx context.Context, wl api.Workload) error {
	spec, err := s.core.ExecSpec(ctx, wl)
	if err != nil {
		return err
	}
	if _, err := s.node.Exec(ctx, wl.ID, spec); err != nil {
		return err
	}
	// Its exit, however soon it comes, waits in run.exit for this
	// goroutine, which stores running first.
	running, ok := s.updateWorkload(ctx, wl.TeamID, wl.ID, func(w *api.Workload) bool {
		if w.State != api.WorkloadStarting {
			return false
		}
		t := s.now()
		w.State, w.StartedAt = api.WorkloadRunning, &t
		return true
	}, func(w api.Workload) (string, map[string]any) {
		return "workload.started", map[string]any{"devices": w.Devices}
	})
	if !ok {
		return context.Canceled
	}
	s.log.Info("workload started", "workload", running.ID)
	return nil
}

// Exited takes the node's report of the workload program's end (its
// one command).
func (r *workloadRun) Exited(_ string, e node.Exit, lost bool) {
	select {
	case r.exit <- workloadExit{e, lost}:
	default:
	}
}

// finishWorkload records a placed workload's end: its exit, output sizes
// and cost. A workload cancelled meanwhile stays cancelled.
func (s *Service) finishWorkload(ctx context.Context, wl api.Workload, state api.WorkloadState, reason string, e *workloadExit) {
	var stdout, stderr int64
	if l, err := s.node.Output(wl.ID, wl.ID); err == nil {
		stdout, stderr = l.Sizes()
		l.Close()
	}
	done, ok := s.updateWorkload(ctx, wl.TeamID, wl.ID, func(w *api.Workload) bool {
		if w.State.Done() {
			return false
		}
		t := s.now()
		w.State, w.StateReason, w.EndedAt = state, reason, &t
		w.StdoutBytes, w.StderrBytes = stdout, stderr
		if e != nil && !e.lost {
			w.Signal, w.TimedOut = e.exit.Signal, e.exit.TimedOut
			if e.exit.Signal == "" {
				code := e.exit.ExitCode
				w.ExitCode = &code
			}
		}
		w.CostUSD = s.workloadCost(*w, t)
		return true
	}, func(w api.Workload) (string, map[string]any) {
		typ := "workload.exited"
		if w.State == api.WorkloadFailed {
			typ = "workload.failed"
		}
		return typ, map[string]any{
			"state": w.State, "reason": w.StateReason, "exit_code": w.ExitCode, "signal": w.Signal,
			"timed_out": w.TimedOut, "cost_usd": w.CostUSD,
		}
	})
	if !ok {
		return
	}
	s.log.Info("workload ended", "workload", done.ID, "state", state, "reason", reason)
	s.kickQueue() // its room and GPUs are free
}

// endQueued ends a workload that is still queued; the events of before
// come before its own.
func (s *Service) endQueued(ctx context.Context, teamID, id string, state api.WorkloadState, reason, typ string, before ...workloadEvent) (api.Workload, bool) {
	w, ok := s.updateWorkload(ctx, teamID, id, func(w *api.Workload) bool {
		if w.State != api.WorkloadQueued {
			return false
		}
		t := s.now()
		w.State, w.StateReason, w.EndedAt = state, reason, &t
		return true
	}, append(slices.Clip(before), func(w api.Workload) (string, map[string]any) {
		return typ, map[string]any{"state": w.State, "reason": w.StateReason}
	})...)
	if ok {
		s.log.Info("workload ended in the queue", "workload", id, "state", state, "reason", reason)
	}
	return w, ok
}

// workloadEvent makes the event of a transition from the workload as
// stored; nil for a change that has none.
type workloadEvent func(w api.Workload) (typ string, data map[string]any)

// updateWorkload changes a stored workload under the workloads' lock:
// change says whether it changed anything. The transition's events (ev,
// whose data, never nil, gets the workload's ID) are all appended before
// waiters are woken, so a waiter that sees the state finds its events.
// It returns the workload as stored and whether it was changed.
func (s *Service) updateWorkload(ctx context.Context, teamID, id string, change func(*api.Workload) bool, ev ...workloadEvent) (api.Workload, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	pctx := context.WithoutCancel(ctx)
	var w api.Workload
	for attempt := 1; ; attempt++ {
		// Each round decides on the workload as stored: another replica
		// may have changed it since the last read.
		var err error
		if w, err = s.store.GetWorkload(pctx, teamID, id); err != nil {
			s.log.Error("read workload", "workload", id, "err", err)
			return w, false
		}
		if !change(&w) {
			return w, false
		}
		if w.State.Done() {
			// Charged before the end is stored: whoever sees the workload
			// ended finds its usage, and a crash in between charges it again
			// on the next end (putting the usage is idempotent).
			s.chargeWorkload(pctx, w)
		}
		err = s.store.UpdateWorkload(pctx, w)
		if err == nil {
			w.Version++
			break
		}
		if !store.Stale(err) || attempt == store.UpdateAttempts {
			s.log.Error("persist workload", "workload", id, "state", w.State, "err", err)
			return w, false
		}
	}
	// Every event of the transition is appended before the waiters wake.
	for _, e := range ev {
		typ, data := e(w)
		data["workload_id"] = w.ID
		s.events.Record(pctx, w.TeamID, typ, "", "", data)
	}
	s.events.Notify()
	return w, true
}

// GetWorkload returns a workload of the team.
func (s *Service) GetWorkload(ctx context.Context, teamID, wid string) (api.Workload, error) {
	if err := page.Scoped(teamID); err != nil {
		return api.Workload{}, err
	}
	if !id.HasPrefix(wid, "wl") {
		return api.Workload{}, api.Errorf(api.CodeNotFound, "workload %q not found", wid)
	}
	w, err := s.store.GetWorkload(ctx, teamID, wid)
	if err != nil {
		return w, err
	}
	if w.State == api.WorkloadRunning {
		if l, err := s.node.Output(w.ID, w.ID); err == nil {
			w.StdoutBytes, w.StderrBytes = l.Sizes()
			l.Close()
		}
	}
	return w, nil
}

// Query selects a page of a team's workloads, oldest first.
type Query struct {
	States []api.WorkloadState
	page.Page
}

// ListWorkloads lists a page of the team's workloads.
func (s *Service) ListWorkloads(ctx context.Context, teamID string, q Query) (api.List[api.Workload], error) {
	if err := page.Scoped(teamID); err != nil {
		return api.List[api.Workload]{}, err
	}
	limit, err := q.Size()
	if err != nil {
		return api.List[api.Workload]{}, err
	}
	for _, st := range q.States {
		if !st.Valid() {
			return api.List[api.Workload]{}, invalid("state %q is unknown", st)
		}
	}
	items, err := s.store.ListWorkloads(ctx, store.WorkloadFilter{TeamID: teamID, States: q.States, After: q.Cursor, Limit: limit + 1})
	if err != nil {
		return api.List[api.Workload]{}, err
	}
	return page.Cut(items, limit, func(w api.Workload) string { return w.ID }), nil
}

// WaitWorkload returns the workload once it is in state want or has
// ended, or as it is when timeout passes.
func (s *Service) WaitWorkload(ctx context.Context, teamID, wid string, want api.WorkloadState, timeout time.Duration) (api.Workload, error) {
	if timeout <= 0 || timeout > s.cfg.MaxWait {
		timeout = s.cfg.MaxWait
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		ch := s.events.Changes()
		w, err := s.GetWorkload(context.WithoutCancel(ctx), teamID, wid)
		if err != nil || w.State == want || w.State.Done() {
			return w, err
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return s.GetWorkload(context.WithoutCancel(ctx), teamID, wid)
		}
	}
}

// CancelWorkload cancels a workload: a queued one leaves the queue; a
// placed one's container is removed (its output so far stays). Cancelling
// one that ended changes nothing.
func (s *Service) CancelWorkload(ctx context.Context, teamID, wid string) (api.Workload, error) {
	return s.cancelWorkload(ctx, teamID, wid, "cancelled by request", nil, true)
}

// cancelWorkload ends a workload cancelled, for reason; the event of
// before (if any) comes before workload.cancelled. With wait, the answer
// comes once a placed workload's container is gone.
func (s *Service) cancelWorkload(ctx context.Context, teamID, wid, reason string, before workloadEvent, wait bool) (api.Workload, error) {
	w, err := s.GetWorkload(ctx, teamID, wid)
	if err != nil {
		return w, err
	}
	if w.State.Done() {
		return w, nil
	}
	var evs []workloadEvent
	if before != nil {
		evs = append(evs, before)
	}
	if w.State == api.WorkloadQueued {
		if done, ok := s.endQueued(ctx, teamID, wid, api.WorkloadCancelled, reason, "workload.cancelled", evs...); ok {
			return done, nil
		}
		// Placed meanwhile: cancel it as a placed one.
	}
	done, ok := s.updateWorkload(ctx, teamID, wid, func(w *api.Workload) bool {
		if w.State.Done() {
			return false
		}
		t := s.now()
		w.State, w.StateReason, w.EndedAt = api.WorkloadCancelled, reason, &t
		w.CostUSD = s.workloadCost(*w, t)
		return true
	}, append(evs, func(w api.Workload) (string, map[string]any) {
		return "workload.cancelled", map[string]any{"state": w.State, "reason": w.StateReason, "cost_usd": w.CostUSD}
	})...)
	if !ok {
		return s.GetWorkload(ctx, teamID, wid)
	}
	s.runsMu.Lock()
	run := s.placed[wid]
	s.runsMu.Unlock()
	if run == nil {
		s.cleanupWorkload(context.WithoutCancel(ctx), wid)
		return done, nil
	}
	run.cancel()
	if wait {
		select {
		case <-run.done:
		case <-ctx.Done():
		}
	}
	return done, nil
}

// WorkloadOutput returns a workload's recorded output, read as a
// command's; the caller closes it.
func (s *Service) WorkloadOutput(ctx context.Context, teamID, wid string) (api.Workload, node.Output, error) {
	w, err := s.GetWorkload(ctx, teamID, wid)
	if err != nil {
		return w, nil, err
	}
	l, err := s.node.Output(w.ID, w.ID)
	if err != nil {
		if w.StartedAt == nil {
			return w, nil, api.Errorf(api.CodeConflict, "workload %s is %s and has no output yet; its output begins when it runs", w.ID, w.State)
		}
		return w, nil, err
	}
	return w, l, nil
}

// Recover, at the core's Recover, reattaches the running workloads (their
// program runs on while the server is away), puts the ones cut short
// while starting back in the queue, and returns the IDs the node must
// keep. Queued ones stay: the queue's owner places them.
func (s *Service) Recover(ctx context.Context) (map[string]bool, error) {
	placed, err := s.store.ListWorkloads(ctx, store.WorkloadFilter{States: []api.WorkloadState{api.WorkloadStarting, api.WorkloadRunning}})
	if err != nil {
		return nil, fmt.Errorf("list placed workloads: %w", err)
	}
	keep := map[string]bool{}
	for _, wl := range placed {
		if wl.State == api.WorkloadRunning {
			spec := s.workloadSpec(wl)
			if r, err := s.store.GetIDRange(ctx, wl.ID); err == nil {
				spec.IDs = node.IDRange{HostID: r.HostID, Size: r.Size}
			}
			runCtx, cancel := context.WithCancel(s.ctx)
			run := s.newRun(wl.ID, cancel)
			if err := s.node.Attach(ctx, spec, []string{wl.ID}); err == nil {
				keep[wl.ID] = true
				s.wg.Go(func() {
					defer cancel()
					defer s.dropRun(wl.ID)
					s.waitWorkload(runCtx, wl, run)
				})
				s.log.Info("workload reattached", "workload", wl.ID)
				continue
			} else {
				cancel()
				s.dropRun(wl.ID)
				s.log.Warn("workload lost on restart", "workload", wl.ID, "err", err)
				s.cleanupWorkload(ctx, wl.ID)
				s.finishWorkload(ctx, wl, api.WorkloadFailed, "the server restarted and could not reattach: "+userReason(err), nil)
				continue
			}
		}
		// Starting: what started is removed and it waits again.
		s.cleanupWorkload(ctx, wl.ID)
		s.updateWorkload(ctx, wl.TeamID, wl.ID, func(w *api.Workload) bool {
			if w.State != api.WorkloadStarting {
				return false
			}
			w.State, w.Devices = api.WorkloadQueued, []string{}
			w.StateReason = "the server restarted while it was starting; queued again"
			return true
		})
	}
	return keep, nil
}
