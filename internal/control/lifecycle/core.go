// Package lifecycle is the core of cove's control plane: the sandbox
// state machine (create, start, setup, sleep, wake, terminate, the idle
// and lifetime limits, the warm pool), each transition persisted in the
// store before its side effects, and the reconciler that makes the store
// and the node agree after a restart (Recover). It is the only writer of
// a sandbox's state. Every run is checked as a runs.Spec
// (internal/control/runs). The features (teams, secrets, commands,
// events, the meter, images, workloads, …) are services of their own
// under internal/control: the core declares the small interface it calls
// of each (services.go) and offers them its sides of theirs (ports.go);
// the wiring, internal/service.NewPlane, builds them and gives them to
// the core (Use).
package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/idranges"
	"github.com/cove-dev/cove/internal/control/meter"
	"github.com/cove-dev/cove/internal/control/runs"
	"github.com/cove-dev/cove/internal/control/setupcache"
	"github.com/cove-dev/cove/internal/id"
	"github.com/cove-dev/cove/internal/node"
	"github.com/cove-dev/cove/internal/store"
)

// Core is the sandbox life cycle: the only writer of a sandbox's state.
type Core struct {
	cfg   Config
	store store.Store
	node  Node
	log   *slog.Logger
	now   func() time.Time
	// telemetry is set before Start (SetTelemetry), then only read.
	telemetry Telemetry
	// replicas are the replicas sharing the store (SetReplicas, before
	// Recover); nil: alone.
	replicas Replicas
	// announce tells the other replicas of a change made here; set
	// before Start (SetAnnounce), then only read; nil: alone.
	announce func()
	// ctx is the server's lifecycle: sandbox starts and terminations run on
	// it, never on a request's context, and Close cancels it.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// exits hands the node's exit reports to each run's receiver
	// (OnExit); set at New.
	exits *runs.Exits

	mu sync.Mutex
	// snapMu orders deleting a snapshot against sandboxes starting on it.
	snapMu sync.Mutex
	// volMu orders deleting a volume against sandboxes created on it.
	volMu sync.Mutex
	// volPoll guards volFull: the volumes found full at the last
	// measurement, raised once until their use drops (volumes.go).
	volPoll sync.Mutex
	volFull map[string]bool
	ops     map[string]*sandboxOps // per sandbox; removed when terminal
	changed chan struct{}          // closed and replaced on every state change
	// exitWatchers are woken at every command exit (setup commands).
	exitWatchers map[*exitWatch]struct{}

	// pool is the warm pool (pool.go); limits the idle and lifetime
	// limits (limits.go); ranges the host ID ranges.
	pool   *warmPool
	limits *limits
	ranges *idranges.Ranges
	// setups is the setup cache; set at SetNode.
	setups *setupcache.Cache

	// checks are the checks of every new run (runs.go); set at New.
	checks runs.Checker
	// secrets resolves the secrets a setup or a git source names; nil:
	// secrets are not configured.
	secrets SecretResolver
	// svc are the feature services (services.go), given by Use.
	svc Services
}

// sandboxOps serializes the life-cycle steps of one sandbox.
type sandboxOps struct {
	mu sync.Mutex
	// starting is closed when an in-flight start ends; nil when none runs.
	starting chan struct{}
	// cancelStart cancels it; a cause of type *setupFailed becomes the
	// failed sandbox's state_reason (a limit reached during setup).
	cancelStart context.CancelCauseFunc
	// upload takes the source upload of a sandbox that awaits one, until
	// uploadClosed is closed; nil when none is awaited.
	upload       chan *uploadReq
	uploadClosed chan struct{}
}

// New returns the core over st. Give it its feature services with Use
// (the wiring, internal/service, builds them over its Ports) and connect
// its node with SetNode before Recover; the node reports command exits to
// the server's OnExit (give it to the node as its node.ExitFunc).
func New(cfg Config, st store.Store, log *slog.Logger) (*Core, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("server config: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Core{
		cfg: cfg, store: st, log: log, now: func() time.Time { return time.Now().UTC() }, telemetry: noTelemetry{},
		ctx: ctx, cancel: cancel,
		ops:     map[string]*sandboxOps{},
		changed: make(chan struct{}),

		exitWatchers: map[*exitWatch]struct{}{},
		volFull:      map[string]bool{},
	}
	s.pool = newWarmPool(s)
	s.limits = newLimits(s)
	s.ranges = idranges.New(st, log)
	// A run with no receiver of its own is a sandbox's command (the
	// commands service is given at Use, before any exit can come).
	s.exits = runs.NewExits(func(sandboxID, commandID string, e node.Exit, lost bool) {
		s.svc.Commands.Exited(sandboxID, commandID, e, lost)
	})
	c := runChecks{s}
	s.checks = runs.Checker{Admission: c, Images: c, Secrets: c, Sources: c, Budgets: c}
	if cfg.Secrets != nil {
		s.secrets = storeSecrets{s}
	}
	return s, nil
}

// SetNode connects the node; call it before Recover. It is separate from New
// because the node reports exits back to the server (OnExit).
func (s *Core) SetNode(n Node) {
	s.node = n
	s.setups = setupcache.New(setupcache.Config{Entries: s.cfg.SetupCacheEntries, Bytes: s.cfg.SetupCacheBytes},
		s.store, n, setupCore{s}, func() time.Time { return s.now() }, s.log)
}

// Close stops the server's background work. Sandboxes keep running; a new
// server reattaches to them.
func (s *Core) Close() {
	s.cancel()
	s.wg.Wait()
}

func (s *Core) opsFor(id string) *sandboxOps {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.ops[id]
	if !ok {
		o = &sandboxOps{}
		s.ops[id] = o
	}
	return o
}

// lockSandbox finds a sandbox, takes its life-cycle lock and reads it again
// under the lock, so a transition decides on the current state. The caller
// unlocks o.mu.
func (s *Core) lockSandbox(ctx context.Context, teamID, ref string) (api.Sandbox, *sandboxOps, error) {
	sb, err := s.GetSandbox(ctx, teamID, ref)
	if err != nil {
		return sb, nil, err
	}
	o := s.opsFor(sb.ID)
	o.mu.Lock()
	if sb, err = s.store.GetSandbox(ctx, teamID, sb.ID); err != nil {
		o.mu.Unlock()
		return sb, nil, err
	}
	return sb, o, nil
}

// notify wakes this replica's waiters and tells the other replicas.
func (s *Core) notify() {
	s.Wake()
	if s.announce != nil {
		s.announce()
	}
}

// Wake wakes every waiter of this replica (long-polls, streams, the
// webhook dispatcher) to read the store again: a change was made through
// another replica.
func (s *Core) Wake() {
	s.mu.Lock()
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()
}

// SetAnnounce makes every change this replica makes call fn, which must
// not block, so that the other replicas sharing the store wake their
// waiters; set it before Start.
func (s *Core) SetAnnounce(fn func()) { s.announce = fn }

func (s *Core) changes() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}

// setState persists a transition and wakes waiters; on success sb is the
// sandbox as stored (its version the stored one). A transition is decided
// on the sandbox's state alone: when another writer (a PATCH, a replica's
// bookkeeping) changed the row since sb was read, setState reads it again
// and, while it is still in the state the transition was decided on,
// applies the transition over that writer's change, which is kept. A row
// that left that state answers conflict: the transition no longer holds.
func (s *Core) setState(ctx context.Context, sb *api.Sandbox, state api.SandboxState, reason string) error {
	from := sb.State
	if isTransient(state) {
		// Claimed before the state is stored: a replica that dies
		// between the two leaves a transition with a known owner.
		s.claim(ctx, sb.ID)
	}
	data := map[string]any{}
	if reason != "" {
		data["reason"] = reason
	}
	// The state and its event are stored in one transaction.
	ev := s.svc.Events.Event("sandbox."+string(state), sb.ID, "", data)
	var stored api.Event
	for attempt := 1; ; attempt++ {
		next := *sb
		s.transition(&next, state, reason)
		var err error
		stored, err = s.store.UpdateSandboxEvent(ctx, next, ev)
		if err == nil {
			next.Version++
			*sb = next
			break
		}
		if !store.Stale(err) || attempt == transitionAttempts {
			return fmt.Errorf("persist %s %s: %w", sb.ID, state, err)
		}
		cur, gerr := s.store.GetSandbox(ctx, sb.TeamID, sb.ID)
		if gerr != nil {
			return fmt.Errorf("read %s again to persist %s: %w", sb.ID, state, gerr)
		}
		if cur.State != from {
			return &movedError{api.Errorf(api.CodeConflict, "sandbox %s became %s meanwhile, not %s; retry", sb.ID, cur.State, state)}
		}
		s.log.Debug("sandbox changed meanwhile; transition applied again", "sandbox", sb.ID, "state", state, "attempt", attempt)
		*sb = s.svc.Meter.Priced(cur)
	}
	s.log.Info("sandbox state", "sandbox", sb.ID, "state", state, "reason", reason)
	s.svc.Events.Appended(stored)
	return nil
}

// transitionAttempts bounds the rounds of a transition that other
// writers keep beating without changing the sandbox's state (a tenant's
// PATCH after PATCH, a replica's bookkeeping): far more than
// store.UpdateAttempts, since each round decides on the row as it is and
// such a writer must not be able to hold a sleep, a wake or a terminate
// off by its pace. A writer that changes the state ends the rounds
// (movedError).
const transitionAttempts = 100

// movedError is a transition refused because the sandbox left the state
// it was decided on (another replica's transition came first).
type movedError struct{ err *api.Error }

func (e *movedError) Error() string { return e.err.Error() }
func (e *movedError) Unwrap() error { return e.err }

// decide runs a transition requested of a sandbox (sleep, wake,
// terminate) under its life-cycle lock, and runs it again on the sandbox
// as it is when another replica's transition came first: what the request
// asks is decided on the state the sandbox is in (sleeping an asleep
// sandbox is a no-op, say), not on the one it was read in.
func (s *Core) decide(ctx context.Context, teamID, ref string, transition func(api.Sandbox, *sandboxOps) (api.Sandbox, error)) (api.Sandbox, error) {
	for attempt := 1; ; attempt++ {
		sb, o, err := s.lockSandbox(ctx, teamID, ref)
		if err != nil {
			return sb, err
		}
		sb, err = transition(sb, o)
		o.mu.Unlock()
		var moved *movedError
		if !errors.As(err, &moved) || attempt == store.UpdateAttempts {
			return sb, err
		}
	}
}

// transition changes sb to state with reason, and the times that go with
// it.
func (s *Core) transition(sb *api.Sandbox, state api.SandboxState, reason string) {
	if state == api.StateRunning && sb.State == api.StateWaking {
		// A woken sandbox starts anew: it is charged from its wake.
		sb.StartedAt = nil
	}
	// A setup runs in the sandbox's container as its running time does,
	// and is charged from its start alike: started_at is set when setup
	// begins. Its idle time counts from the end of setup.
	if (state == api.StateRunning || state == api.StateSettingUp) && sb.StartedAt == nil {
		t := s.now()
		sb.StartedAt = &t
		sb.LastActiveAt = &t
	}
	if state == api.StateRunning && sb.State == api.StateSettingUp {
		t := s.now()
		sb.LastActiveAt = &t
	}
	sb.State = state
	sb.StateReason = reason
}

// CreateSandbox validates and persists a new sandbox, then starts it in the
// background. The returned sandbox is in state creating.
func (s *Core) CreateSandbox(ctx context.Context, teamID string, req api.CreateSandboxRequest) (api.Sandbox, error) {
	return s.CreateSandboxWith(ctx, teamID, req, CreateOptions{})
}

// CreateOptions are what a create may ask beyond its request, which no
// client of cove's API can send: only a caller inside the server, E2B's
// translator (internal/e2b), sets them.
type CreateOptions struct {
	// SetID makes a sandbox whose set-uid programs (sudo) raise
	// privileges (api.Sandbox.SetID). It never comes from the warm pool.
	SetID bool
}

// CreateSandboxWith is CreateSandbox with options.
func (s *Core) CreateSandboxWith(ctx context.Context, teamID string, req api.CreateSandboxRequest, opts CreateOptions) (api.Sandbox, error) {
	if err := scoped(teamID); err != nil {
		return api.Sandbox{}, err
	}
	if err := refuseSandboxGPUs(req); err != nil {
		return api.Sandbox{}, err
	}
	sid := id.For(ctx, "sbx")
	if id.Resumed(ctx) {
		// The ID is derived from an Idempotency-Key whose claim this
		// attempt took over: a second attempt of the request (its first
		// on a replica that died) answers the sandbox the first attempt
		// made. A first attempt's derived ID is new: nothing to look for.
		if sb, err := s.store.GetSandbox(ctx, teamID, sid); err == nil {
			return s.svc.Meter.Priced(sb), nil
		} else if api.ErrorCode(err) != api.CodeNotFound {
			return api.Sandbox{}, err
		}
		// A sandbox taken from the warm pool keeps its own ID and the
		// derived one beside it.
		made, err := s.store.ListSandboxes(ctx, store.SandboxFilter{TeamID: teamID, IdempotencyRef: sid, Limit: 1})
		if err != nil {
			return api.Sandbox{}, err
		}
		if len(made) > 0 {
			return s.svc.Meter.Priced(made[0]), nil
		}
	}
	snap, err := s.sourceSnapshot(ctx, teamID, &req)
	if err != nil {
		return api.Sandbox{}, err
	}
	if snap != nil {
		req.Source = &api.Source{Type: api.SourceSnapshot, SnapshotID: snap.ID}
	}
	img, release, err := s.svc.Images.Use(ctx, teamID, &req)
	if err != nil {
		return api.Sandbox{}, err
	}
	defer release()
	sb, err := s.newSandbox(sid, teamID, req)
	if err != nil {
		return api.Sandbox{}, err
	}
	sb.Secrets = api.SecretNames(req.Secrets)
	sb.Placeholders = placeholders(req.Secrets)
	if err := s.checkSecretsExist(ctx, teamID, sb.Network.Inject, req.Secrets); err != nil {
		return api.Sandbox{}, err
	}
	sb.SetID = opts.SetID
	if err := s.checks.Check(ctx, sandboxRun(sb, img)); err != nil {
		return api.Sandbox{}, err
	}
	var volumes []node.VolumeMount
	if len(req.Volumes) > 0 {
		// Held until the sandbox is stored: no volume it names is
		// deleted in between (DeleteVolume).
		s.volMu.Lock()
		defer s.volMu.Unlock()
		if sb.Volumes, volumes, err = s.resolveMounts(ctx, teamID, req.Volumes); err != nil {
			return api.Sandbox{}, err
		}
	}
	warm := ""
	// A pooled sandbox started without a CA of its own for injection, or
	// any volume.
	if s.pool.fits(sb) && sb.Source == nil && sb.Setup == nil && len(sb.Network.Inject) == 0 && len(sb.Volumes) == 0 {
		if warm = s.pool.take(sb.SetID); warm != "" {
			// A pooled sandbox was admitted (and, in a fleet, placed)
			// when the pool started it. It keeps its own ID; an ID
			// derived from an Idempotency-Key is stored beside it, where
			// a second attempt of the request looks.
			sb.ID = warm
			if id.Derived(ctx) {
				sb.IdempotencyRef = sid
			}
		}
	}
	if warm == "" {
		spec := s.spec(sb)
		spec.Volumes = volumes
		if err := s.node.Admit(ctx, spec); err != nil {
			return api.Sandbox{}, err
		}
		// A pooled sandbox holds its range already.
		if _, err := s.ranges.Alloc(ctx, sb.ID); err != nil {
			s.unadmit(ctx, sb.ID)
			return api.Sandbox{}, err
		}
	}
	s.claim(ctx, sb.ID)
	// The sandbox and its sandbox.creating are stored in one transaction.
	created, err := s.store.CreateSandboxEvent(ctx, sb,
		s.svc.Events.Event("sandbox.creating", sb.ID, "", map[string]any{"name": sb.Name, "warm": warm != ""}))
	if err != nil {
		if warm != "" {
			s.pool.discard(ctx, warm)
		} else {
			s.ranges.Release(context.WithoutCancel(ctx), sb.ID)
			s.unadmit(ctx, sb.ID)
		}
		return api.Sandbox{}, err
	}
	sb.Version = 1 // as stored
	s.svc.Events.Appended(created)
	if snap != nil {
		if err := s.standOn(ctx, sb.ID, snap); err != nil {
			// Nothing of it started: it is failed at once.
			s.persistState(context.WithoutCancel(ctx), &sb, api.StateFailed, "start failed: "+userReason(err))
			s.ranges.Release(context.WithoutCancel(ctx), sb.ID)
			s.unadmit(ctx, sb.ID)
			return api.Sandbox{}, err
		}
	}
	s.log.Info("sandbox created", "sandbox", sb.ID, "team", teamID, "name", sb.Name, "warm", warm != "")
	if warm != "" {
		if s.pool.start(context.WithoutCancel(ctx), &sb) {
			return s.svc.Meter.Priced(sb), nil
		}
		// The pooled sandbox could not be used: start one cold, same ID
		// (in a range of its own again: discarding released the pool's).
		s.pool.discard(ctx, warm)
		if _, err := s.ranges.Alloc(context.WithoutCancel(ctx), sb.ID); err != nil {
			s.log.Warn("sandbox start failed", "sandbox", sb.ID, "err", err)
			s.persistState(context.WithoutCancel(ctx), &sb, api.StateFailed, "start failed: "+userReason(err))
			return sb, nil
		}
	}

	o := s.opsFor(sb.ID)
	startCtx, cancel := context.WithCancelCause(s.ctx)
	o.mu.Lock()
	o.starting, o.cancelStart = make(chan struct{}), cancel
	done := o.starting
	var upload chan *uploadReq
	if sb.Source != nil && sb.Source.Type == api.SourceUpload {
		upload = make(chan *uploadReq)
		o.upload, o.uploadClosed = upload, make(chan struct{})
	}
	o.mu.Unlock()
	s.wg.Go(func() {
		defer close(done)
		defer cancel(nil)
		s.start(startCtx, sb, upload)
	})
	return s.svc.Meter.Priced(sb), nil
}

// unadmit gives back what Admit took for a sandbox that was never
// created (a fleet's placement and its reservation): nothing of it runs,
// so destroying it removes only that.
func (s *Core) unadmit(ctx context.Context, id string) {
	if err := s.node.Destroy(context.WithoutCancel(ctx), id); err != nil {
		s.log.Warn("give back the admission of a sandbox not created", "sandbox", id, "err", err)
	}
}

func (s *Core) newSandbox(sid, teamID string, req api.CreateSandboxRequest) (api.Sandbox, error) {
	if err := validateName(req.Name); err != nil {
		return api.Sandbox{}, err
	}
	tmpl := req.Template
	if tmpl == "" {
		tmpl = s.cfg.DefaultTemplate
	}
	if _, isImage := s.svc.Images.Image(teamID, tmpl); !slices.Contains(s.cfg.Templates, tmpl) && !isImage {
		return api.Sandbox{}, invalid("template %q does not exist; use %q", tmpl, s.cfg.DefaultTemplate)
	}
	res, err := s.cfg.resolveResources(req.Resources)
	if err != nil {
		return api.Sandbox{}, err
	}
	if err := validateEnv("env", req.Env); err != nil {
		return api.Sandbox{}, err
	}
	if err := validateLabels(req.Labels); err != nil {
		return api.Sandbox{}, err
	}
	if err := validateMounts(req.Volumes); err != nil {
		return api.Sandbox{}, err
	}
	workdir := s.cfg.DefaultWorkdir
	if req.Workdir != "" {
		if workdir, err = validatePath("workdir", req.Workdir); err != nil {
			return api.Sandbox{}, err
		}
		if workdir == "/" {
			return api.Sandbox{}, invalid("workdir cannot be /")
		}
	}
	provision, err := runs.CheckProvision(req, s.secrets != nil)
	if err != nil {
		return api.Sandbox{}, err
	}
	network := api.NetworkPolicy{Allow: []string{}}
	if req.Network != nil {
		if network.Allow, err = checkPolicy("network.allow", req.Network.Allow); err != nil {
			return api.Sandbox{}, err
		}
		if len(req.Network.SetupAllow) > 0 {
			return api.Sandbox{}, invalid("network.setup_allow is set through setup.network.allow")
		}
		if network.Inject, err = checkInject("network.inject", req.Network.Inject); err != nil {
			return api.Sandbox{}, err
		}
	}
	if req.Setup != nil && req.Setup.Network != nil {
		if len(req.Setup.Network.Inject) > 0 {
			return api.Sandbox{}, invalid("setup.network.inject: a setup command's requests are never injected; give the rules in network.inject")
		}
		if network.SetupAllow, err = checkPolicy("setup.network.allow", req.Setup.Network.Allow); err != nil {
			return api.Sandbox{}, err
		}
	}
	onIdle := req.OnIdle
	switch onIdle {
	case "":
		onIdle = "sleep"
	case "sleep", "terminate":
	default:
		return api.Sandbox{}, invalid("on_idle is %q; use sleep or terminate", onIdle)
	}
	var idle, lifetime int64
	if req.IdleTimeoutS != nil {
		if idle = *req.IdleTimeoutS; idle < 0 {
			return api.Sandbox{}, invalid("idle_timeout_s is negative")
		}
	}
	if req.MaxLifetimeS != nil {
		if lifetime = *req.MaxLifetimeS; lifetime < 0 {
			return api.Sandbox{}, invalid("max_lifetime_s is negative")
		}
	}
	if req.SpendLimitUSD != nil && *req.SpendLimitUSD < 0 {
		return api.Sandbox{}, invalid("spend_limit_usd is negative")
	}
	onBudget, err := meter.ValidateOnBudget(req.OnBudget)
	if err != nil {
		return api.Sandbox{}, err
	}
	alerts := slices.Clone(api.DefaultBudgetAlerts)
	if req.BudgetAlerts != nil {
		if alerts, err = meter.ValidateBudgetAlerts(req.BudgetAlerts); err != nil {
			return api.Sandbox{}, err
		}
	}
	now := s.now()
	sb := api.Sandbox{
		ID: sid, Name: req.Name, TeamID: teamID, Template: tmpl,
		State: api.StateCreating, Resources: res, Env: req.Env, Workdir: workdir,
		Network: network, Labels: req.Labels,
		IdleTimeoutS: idle, OnIdle: onIdle, MaxLifetimeS: lifetime,
		SpendLimitUSD: req.SpendLimitUSD, OnBudget: onBudget, BudgetAlerts: alerts, CreatedAt: now, Provision: provision,
	}
	if sb.Labels == nil {
		sb.Labels = map[string]string{}
	}
	if lifetime > 0 {
		t := now.Add(time.Duration(lifetime) * time.Second)
		sb.ExpiresAt = &t
	}
	return sb, nil
}

// start brings a created sandbox to running, or to failed with a reason:
// the node starts it, then its source lands and its setup runs
// (provision), then it is running. upload takes its source upload when it
// awaits one.
func (s *Core) start(ctx context.Context, sb api.Sandbox, upload chan *uploadReq) {
	o := s.opsFor(sb.ID)
	if upload != nil {
		defer func() {
			o.mu.Lock()
			close(o.uploadClosed)
			o.upload = nil
			o.mu.Unlock()
		}()
	}
	spec, err := s.startSpec(ctx, sb)
	if err == nil {
		err = s.node.Start(ctx, spec)
	}
	// Persisting the outcome must not depend on ctx: a terminate may have
	// cancelled the start, and the store must still learn what happened.
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	o.mu.Lock()
	cur, gerr := s.store.GetSandbox(pctx, sb.TeamID, sb.ID)
	if gerr != nil {
		o.mu.Unlock()
		s.log.Error("read sandbox after start", "sandbox", sb.ID, "err", gerr)
		return
	}
	if cur.State != api.StateCreating {
		// Terminated while starting: the terminator destroys what started.
		o.mu.Unlock()
		return
	}
	applied := cur.Network
	if err == nil {
		// A PATCH while the sandbox was creating changed the stored policy
		// but could not reach a sandbox that did not run yet: the policy
		// it runs under is the one stored now.
		if !slices.Equal(applied.Inject, sb.Network.Inject) {
			err = s.applyInjection(pctx, cur)
		}
		if perr := s.node.SetPolicy(sb.ID, applied); err == nil && perr != nil {
			err = fmt.Errorf("apply the network policy: %w", perr)
		}
	}
	if err != nil {
		defer o.mu.Unlock()
		s.log.Warn("sandbox start failed", "sandbox", sb.ID, "err", err)
		if derr := s.node.Destroy(pctx, sb.ID); derr != nil {
			s.log.Error("clean up failed start", "sandbox", sb.ID, "err", derr)
		} else {
			s.ranges.Release(pctx, sb.ID)
		}
		s.persistState(pctx, &cur, api.StateFailed, "start failed: "+userReason(err))
		return
	}
	o.mu.Unlock()

	// The source and the setup run without the life-cycle lock (a
	// terminate cancels ctx and waits for this goroutine).
	keepOutput, err := s.provision(ctx, &cur, upload)
	// The provision (a clone, a setup) may have outlasted the first bound:
	// its outcome gets a bound of its own.
	pctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	o.mu.Lock()
	defer o.mu.Unlock()
	cur, gerr = s.store.GetSandbox(pctx, sb.TeamID, sb.ID)
	if gerr != nil {
		s.log.Error("read sandbox after provision", "sandbox", sb.ID, "err", gerr)
		return
	}
	if cur.State != api.StateCreating && cur.State != api.StateSettingUp {
		return // terminated meanwhile
	}
	if err != nil {
		s.log.Warn("sandbox provision failed", "sandbox", sb.ID, "err", err)
		reason := ""
		var sf *setupFailed
		switch {
		case errors.As(err, &sf):
			reason = sf.reason
		case errors.As(context.Cause(ctx), &sf):
			// Stopped by a limit (failSetup).
			reason = sf.reason
		case ctx.Err() != nil:
			reason = "start cancelled"
		default:
			reason = "provision failed: " + userReason(err)
		}
		s.loseCommands(pctx, sb.ID)
		destroy := s.node.Destroy
		if keepOutput {
			// The setup's recorded output stays readable until the
			// sandbox is deleted (DELETE removes it).
			destroy = s.node.DestroyRuntime
		}
		if derr := destroy(pctx, sb.ID); derr != nil {
			s.log.Error("clean up failed provision", "sandbox", sb.ID, "err", derr)
		}
		s.persistState(pctx, &cur, api.StateFailed, reason)
		return
	}
	if err := s.setState(pctx, &cur, api.StateRunning, ""); err != nil {
		s.log.Error("persist sandbox state", "sandbox", sb.ID, "state", api.StateRunning, "err", err)
		return
	}
	s.reapplyPolicy(cur, applied)
}

// persistState is setState for background transitions, which have no
// caller to return an error to: a failure to persist is logged with the
// state that was meant, and the next Recover settles the sandbox.
func (s *Core) persistState(ctx context.Context, sb *api.Sandbox, state api.SandboxState, reason string) {
	if err := s.setState(ctx, sb, state, reason); err != nil {
		s.log.Error("persist sandbox state", "sandbox", sb.ID, "state", state, "err", err)
	}
}

// userReason is what a user may read of an error in a state_reason: the
// message of a coded error, and for any other (whose text may hold host
// paths or a runtime's log) only that the node failed. The caller logs the
// whole error.
func userReason(err error) string {
	var e *api.Error
	if errors.As(err, &e) && e.Code != api.CodeInternal {
		return e.Message
	}
	return "internal error on the node (the server log has the details)"
}

func hostname(sb api.Sandbox) string {
	if sb.Name != "" {
		return sb.Name
	}
	return sb.ID
}

// GetSandbox finds a sandbox of the team by ID or name.
// Looking at a sandbox is not activity; see activeSandbox.
func (s *Core) GetSandbox(ctx context.Context, teamID, ref string) (api.Sandbox, error) {
	if err := scoped(teamID); err != nil {
		return api.Sandbox{}, err
	}
	var sb api.Sandbox
	var err error
	switch {
	case id.HasPrefix(ref, "sbx"):
		sb, err = s.store.GetSandbox(ctx, teamID, ref)
	case validateName(ref) != nil || ref == "":
		return api.Sandbox{}, api.Errorf(api.CodeNotFound, "sandbox %q not found", ref)
	default:
		sb, err = s.store.GetSandboxByName(ctx, teamID, ref)
	}
	if err != nil {
		return sb, err
	}
	return s.svc.Meter.Priced(sb), nil
}

// activeSandbox is GetSandbox for calls that act in the sandbox (commands,
// their input and output, files): they count as activity for its idle
// timeout. Reading the sandbox object, waiting on it and listing events do
// not, so watching a sandbox never keeps it awake.
func (s *Core) activeSandbox(ctx context.Context, teamID, ref string) (api.Sandbox, error) {
	sb, err := s.GetSandbox(ctx, teamID, ref)
	if err == nil {
		s.limits.touch(sb.ID, s.now())
	}
	return sb, err
}

// WaitSandbox returns the sandbox once it is in state want or a terminal
// state, or as it is when timeout passes.
func (s *Core) WaitSandbox(ctx context.Context, teamID, ref string, want api.SandboxState, timeout time.Duration) (api.Sandbox, error) {
	return s.waitUntil(ctx, teamID, ref, func(st api.SandboxState) bool { return st == want || st.Terminal() }, timeout)
}

// waitUntil returns the sandbox once done holds of its state, or as it is
// when timeout (at most MaxWait) passes or ctx ends.
func (s *Core) waitUntil(ctx context.Context, teamID, ref string, done func(api.SandboxState) bool, timeout time.Duration) (api.Sandbox, error) {
	if timeout <= 0 || timeout > s.cfg.MaxWait {
		timeout = s.cfg.MaxWait
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		ch := s.changes()
		sb, err := s.GetSandbox(ctx, teamID, ref)
		if err != nil {
			if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
				return sb, nil
			}
			return sb, err
		}
		if done(sb.State) {
			return sb, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			// The wait ran out: answer with the state now, on a fresh context.
			return s.GetSandbox(context.WithoutCancel(ctx), teamID, ref)
		}
	}
}

// SandboxQuery selects a page of a team's sandboxes, oldest first.
type SandboxQuery struct {
	States []api.SandboxState
	// Labels all must match.
	Labels map[string]string
	Page
}

// ListSandboxes lists a page of the team's sandboxes.
func (s *Core) ListSandboxes(ctx context.Context, teamID string, q SandboxQuery) (api.List[api.Sandbox], error) {
	if err := scoped(teamID); err != nil {
		return api.List[api.Sandbox]{}, err
	}
	limit, err := q.Size()
	if err != nil {
		return api.List[api.Sandbox]{}, err
	}
	for _, st := range q.States {
		if !st.Valid() {
			return api.List[api.Sandbox]{}, invalid("state %q is unknown", st)
		}
	}
	items, err := s.store.ListSandboxes(ctx, store.SandboxFilter{
		TeamID: teamID, States: q.States, Labels: q.Labels, After: q.Cursor, Limit: limit + 1,
	})
	if err != nil {
		return api.List[api.Sandbox]{}, err
	}
	for i := range items {
		items[i] = s.svc.Meter.Priced(items[i])
	}
	return cut(items, limit, func(sb api.Sandbox) string { return sb.ID }), nil
}

// TerminateSandbox marks a sandbox terminating and removes it in the
// background. Terminating a terminated sandbox is a no-op.
func (s *Core) TerminateSandbox(ctx context.Context, teamID, ref string) (api.Sandbox, error) {
	return s.decide(ctx, teamID, ref, func(sb api.Sandbox, o *sandboxOps) (api.Sandbox, error) {
		if sb.State == api.StateTerminated || sb.State == api.StateTerminating {
			return sb, nil
		}
		if err := s.setState(ctx, &sb, api.StateTerminating, "terminated by request"); err != nil {
			return sb, err
		}
		starting := o.starting
		if o.cancelStart != nil {
			o.cancelStart(nil)
		}
		s.wg.Go(func() {
			if starting != nil {
				<-starting
			}
			s.finishTerminate(s.ctx, sb, "terminated by request")
		})
		return sb, nil
	})
}

// finishTerminate removes everything of a sandbox and records it terminated.
func (s *Core) finishTerminate(ctx context.Context, sb api.Sandbox, reason string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	o := s.opsFor(sb.ID)
	o.mu.Lock()
	defer o.mu.Unlock()
	s.loseCommands(ctx, sb.ID)
	if err := s.node.Destroy(ctx, sb.ID); err != nil {
		s.log.Error("destroy sandbox", "sandbox", sb.ID, "err", err)
		s.persistState(ctx, &sb, api.StateFailed, "terminate could not remove everything: "+userReason(err))
		return
	}
	// Nothing of the sandbox is left: its range is free before anyone
	// can see it terminated.
	s.ranges.Release(ctx, sb.ID)
	s.persistState(ctx, &sb, api.StateTerminated, reason)
	s.mu.Lock()
	delete(s.ops, sb.ID)
	s.mu.Unlock()
	s.dropForkSnapshots(ctx, sb)
}

// loseCommands marks the sandbox's running commands lost.
func (s *Core) loseCommands(ctx context.Context, sandboxID string) {
	cmds, err := s.store.ListCommands(ctx, store.CommandFilter{SandboxID: sandboxID, States: []api.CommandState{api.CommandRunning}})
	if err != nil {
		s.log.Error("list running commands", "sandbox", sandboxID, "err", err)
		return
	}
	t := s.now()
	for _, c := range cmds {
		if err := s.loseCommand(ctx, c, t); err != nil {
			s.log.Error("mark command lost", "command", c.ID, "err", err)
		}
	}
}

// loseCommand marks a running command lost at t. When its row changed
// meanwhile (its exit recorded by another replica) it reads it again: a
// command that ended stays as it ended.
func (s *Core) loseCommand(ctx context.Context, c api.Command, t time.Time) error {
	for attempt := 1; ; attempt++ {
		if c.State.Done() {
			return nil
		}
		c.State, c.EndedAt = api.CommandLost, &t
		err := s.store.UpdateCommand(ctx, c)
		if !store.Stale(err) || attempt == store.UpdateAttempts {
			return err
		}
		if c, err = s.store.GetCommand(ctx, c.SandboxID, c.ID); err != nil {
			return err
		}
	}
}

// LiveSandbox returns a running sandbox for a live operation such as a file
// call or a command. An asleep sandbox is woken first (it costs money
// again) unless wake is false, which answers a conflict saying why. A
// sandbox sleeping or waking is waited for (within ctx and MaxWait): one
// that ends asleep is then woken, so a call sent just after a sleep runs
// once the sleep is done and the sandbox is back.
func (s *Core) LiveSandbox(ctx context.Context, teamID, ref string, wake bool) (api.Sandbox, error) {
	sb, err := s.activeSandbox(ctx, teamID, ref)
	if err != nil {
		return sb, err
	}
	inTransition := func(st api.SandboxState) bool { return st == api.StateSleeping || st == api.StateWaking }
	// Each round settles one transition: sleeping → asleep, asleep →
	// (wake) → running. A wake of ours that fails leaves the sandbox
	// asleep with its reason, which is then the answer.
	woke := false
	for range 4 {
		switch sb.State {
		case api.StateRunning:
			return sb, nil
		case api.StateAsleep, api.StateSleeping, api.StateWaking:
		default:
			return sb, api.Errorf(api.CodeConflict, "sandbox %s is %s; live calls need a running sandbox", sb.ID, sb.State)
		}
		if !wake {
			return sb, api.Errorf(api.CodeConflict, "sandbox %s is %s and wake=false was given; wake it (POST /v1/sandboxes/%s/wake) or drop wake=false", sb.ID, sb.State, sb.ID)
		}
		if sb.State == api.StateAsleep {
			if woke {
				return sb, api.Errorf(api.CodeConflict, "sandbox %s is asleep and could not wake: %s", sb.ID, sb.StateReason)
			}
			woke = true
			if _, err := s.WakeSandbox(ctx, teamID, sb.ID); err != nil {
				return sb, err
			}
		}
		if sb, err = s.waitUntil(ctx, teamID, sb.ID, func(st api.SandboxState) bool { return !inTransition(st) }, s.cfg.MaxWait); err != nil {
			return sb, err
		}
		if inTransition(sb.State) {
			return sb, api.Errorf(api.CodeConflict, "sandbox %s is still %s; the call stopped waiting for it (its deadline or timeout passed)", sb.ID, sb.State)
		}
	}
	return sb, api.Errorf(api.CodeConflict, "sandbox %s is %s; it kept changing state while the call waited; retry", sb.ID, sb.State)
}
