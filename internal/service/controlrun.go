package service

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/fleet"
	"github.com/cove-dev/cove/internal/control/fleet/join"
	"github.com/cove-dev/cove/internal/control/fleet/remote"
	"github.com/cove-dev/cove/internal/netpolicy"
	tmplstate "github.com/cove-dev/cove/internal/templates"
)

// ControlConfig is the configuration of `cove control`: the control
// plane's side of Config, and its fleet.
type ControlConfig struct {
	Config
	// NodeListen is the TLS listener for nodes only (join, heartbeats).
	NodeListen string
	// JoinTokenTTL bounds a generated join token's life; JoinTokenFile
	// names a token the operator supplies instead.
	JoinTokenTTL  time.Duration
	JoinTokenFile string
	// NodeLostAfter: a node silent this long (on this clock) is lost.
	NodeLostAfter time.Duration
	// CPUOvercommit and MemoryOvercommit multiply each node's capacity
	// for placement.
	CPUOvercommit, MemoryOvercommit float64
}

// Validate reports a control plane configuration that cannot work.
func (c *ControlConfig) Validate() error {
	switch {
	case c.NodeListen == "":
		return errors.New("--node-listen: empty (host:port of the TLS listener nodes join; port 0 takes a free one)")
	case c.NodeLostAfter <= 0:
		return fmt.Errorf("--node-lost-after %v: want above 0", c.NodeLostAfter)
	case c.CPUOvercommit <= 0 || c.MemoryOvercommit <= 0:
		return fmt.Errorf("--cpu-overcommit %v and --memory-overcommit %v: want both above 0", c.CPUOvercommit, c.MemoryOvercommit)
	}
	return nil
}

// RunControl runs the control plane alone, with no node of its own, until
// ctx is done: the API and console, and a TLS listener where nodes join.
// Sandboxes are placed on the nodes that joined.
func RunControl(ctx context.Context, cfg ControlConfig, log *slog.Logger, progress io.Writer, ready func(Started)) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if err := prepareDirs(&cfg.Config, false); err != nil {
		return err
	}
	// Templates are what the nodes have: the default one is waited for
	// until a node reports it.
	tmplStates := tmplstate.New()
	cfg.Server.Templates = []string{cfg.Server.DefaultTemplate}
	// Saves are shared: the last one stays a sandbox's recovery point
	// while it runs after a wake, for a node's loss.
	cfg.Server.KeepSaveAfterWake = true
	tmplStates.Set(api.Template{Name: cfg.Server.DefaultTemplate, Kind: "managed", Status: api.TemplateBuilding, Progress: "waiting for a node that has it"})
	ps, err := openPlaneSide(ctx, cfg.Config, tmplStates, log)
	if err != nil {
		return err
	}
	defer ps.close()
	srv := ps.plane.Core
	// Imported images reach the nodes through the shared store: each is
	// published there as it is imported, and a node fetches it by digest.
	blobs, err := openSaves(ctx, cfg.Config)
	if err != nil {
		return err
	}
	defer blobs.Close()
	warnUnsharedSaves(cfg.Config, log)
	ps.importer.SetBlobs(blobs)
	// Assets too: any replica serves what another took.
	ps.shareAssets(blobs)

	// The remote clients' event streams run until Run returns.
	clientCtx, stopClients := context.WithCancel(context.WithoutCancel(ctx))
	var clientWG sync.WaitGroup
	defer clientWG.Wait()
	defer stopClients()
	var js *join.Service
	// Where the store carries notifications (PostgreSQL), a change of the
	// fleet made here is told to the other replicas at once; they poll
	// anyway.
	notes, _ := any(ps.st).(notifier)
	var changed func(context.Context)
	if notes != nil {
		changed = func(ctx context.Context) {
			if err := notes.Notify(ctx, nodesChannel); err != nil {
				log.Warn("tell the other replicas of a change of the fleet", "err", err)
			}
		}
	}
	var fl *fleet.Fleet
	fl, err = fleet.New(fleet.Config{
		Store:   ps.st,
		Changed: changed,
		Dial: func(nodeID, addr string) (fleet.NodeClient, error) {
			c := remote.New(remote.Config{
				NodeID: nodeID, Addr: addr, TLS: js.NodeClientTLS(nodeID),
				// Every replica hears the node's events: an exit is
				// recorded once (a command that ended stays so) and goes
				// to the replica that waits for it; a denial is told by
				// the replica the node heartbeats to.
				OnExit: srv.OnExit,
				OnDenied: func(sandboxID string, o api.NetworkObservation, suppressed int64) {
					if fl.Beating(nodeID) {
						srv.NetworkDenied(sandboxID, o, suppressed)
					}
				},
				OnInjected: func(sandboxID string, e netpolicy.InjectEvent) {
					if fl.Beating(nodeID) {
						srv.NetworkInjected(sandboxID, e)
					}
				},
				Log: log.With("component", "remote", "node", nodeID),
			})
			clientWG.Go(func() { c.Run(clientCtx) })
			return c, nil
		},
		LostAfter:        cfg.NodeLostAfter,
		CPUOvercommit:    cfg.CPUOvercommit,
		MemoryOvercommit: cfg.MemoryOvercommit,
		Log:              log.With("component", "fleet"),
	})
	if err != nil {
		return err
	}
	js, err = join.New(ctx, join.Config{
		DataDir: cfg.DataDir, TokenTTL: cfg.JoinTokenTTL, TokenFile: cfg.JoinTokenFile,
		HeartbeatInterval: cfg.NodeLostAfter / 5,
	}, join.Deps{Store: ps.st, Keyring: ps.cfg.Server.Secrets, Registry: fl, Log: log.With("component", "join")})
	if err != nil {
		return err
	}
	if err := fl.Load(ctx); err != nil {
		return err
	}
	fl.SetSandboxes(srv)
	ps.plane.SetNode(fl)
	ps.plane.Nodes, ps.plane.JoinTokens = fl, joinTokens{js}
	defer srv.Close()

	if err := ps.prepare(ctx); err != nil {
		return err
	}
	// The node listener binds before Recover: nodes register again while
	// the sandboxes they hold are reattached.
	nln, err := net.Listen("tcp", cfg.NodeListen)
	if err != nil {
		return fmt.Errorf("node listener: %w", err)
	}
	nodeSrv := newHTTPServer(cfg.HTTP, js.Handler(), context.WithoutCancel(ctx))
	nodeSrv.TLSConfig = js.ListenerTLS()
	// serveHTTP serves it over TLS with that configuration.
	nodes := &servedListener{ln: nln, srv: nodeSrv}
	nodes.start()
	defer nodes.stop()
	listeners := Listeners{"node": nln.Addr().String()}

	fleetCtx, stopFleet := context.WithCancel(context.WithoutCancel(ctx))
	var fleetWG sync.WaitGroup
	defer fleetWG.Wait()
	defer stopFleet()
	// A template is qualified once, when it first becomes ready in the
	// fleet: its self-test runs through the core on a node placement
	// picks, after the sandboxes are recovered.
	q := newFleetQualifier(func(ctx context.Context, name string) error {
		st, err := srv.SelfTest(ctx, name)
		if err != nil {
			return err
		}
		log.Info("template self-tested", "template", name, "failures", st.Failures)
		tmplStates.Update(name, func(t *api.Template) { t.Qualified, t.SelfTest = len(st.Failures) == 0, &st })
		srv.TemplatesChanged()
		return nil
	}, log)
	// Every replica keeps its view of the fleet fresh and reattaches the
	// sandboxes of a node that registers through it.
	fleetWG.Go(func() { fl.Run(fleetCtx) })
	if notes != nil {
		fleetWG.Go(func() { notes.Listen(fleetCtx, nodesChannel, fl.Poke) })
	}
	fleetWG.Go(func() { followTemplates(fleetCtx, fl, tmplStates, srv.TemplatesChanged, q.ready) })
	fleetWG.Go(func() { q.run(fleetCtx) })

	if err := srv.Recover(ctx); err != nil {
		return fmt.Errorf("recover sandboxes: %w", err)
	}
	q.begin()
	srv.StartReplica()
	// Node-loss detection is a singleton: it runs on the leader only.
	stopReplica := ps.runReplica(ctx, func(ctx context.Context) { fl.RunLossDetection(ctx) })
	defer stopReplica()
	ps.metrics.ObserveNodes(fl.Nodes)
	return ps.serve(ctx, listeners, nil, ready)
}

// nodesChannel is the notification channel of changes of the fleet's
// nodes between control replicas.
const nodesChannel = "cove_nodes"

// followTemplates keeps the templates' states to what the ready nodes
// have: a template is ready while a node that can start it is. ready is
// told each template the fleet has.
func followTemplates(ctx context.Context, fl *fleet.Fleet, states *tmplstate.Registry, changed func(), ready func(string)) {
	var last []string
	for {
		names, wait := fl.Templates()
		if !slices.Equal(names, last) {
			for _, n := range names {
				if t, ok := states.Get(n); !ok || t.Status != api.TemplateReady {
					states.Set(api.Template{Name: n, Kind: "managed", Status: api.TemplateReady})
				}
				ready(n)
			}
			last = names
			changed()
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return
		}
	}
}

// fleetQualifier runs each template's self-test once in the life of the
// control plane, when the template is first ready in the fleet, one at a
// time, from the time begin is called. A self-test that could not run (no
// node had room) is tried again when the fleet's templates change.
type fleetQualifier struct {
	selfTest func(ctx context.Context, name string) error
	log      *slog.Logger
	started  chan struct{}
	once     sync.Once

	mu    sync.Mutex
	tried map[string]bool
	queue []string
	more  chan struct{} // signalled when queue grows
}

func newFleetQualifier(selfTest func(ctx context.Context, name string) error, log *slog.Logger) *fleetQualifier {
	return &fleetQualifier{selfTest: selfTest, log: log, started: make(chan struct{}),
		tried: map[string]bool{}, more: make(chan struct{}, 1)}
}

// ready queues the self-test of a template the fleet has, unless it ran.
func (q *fleetQualifier) ready(name string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.tried[name] {
		return
	}
	q.tried[name] = true
	q.queue = append(q.queue, name)
	select {
	case q.more <- struct{}{}:
	default:
	}
}

// begin lets the self-tests run: the core may start sandboxes.
func (q *fleetQualifier) begin() { q.once.Do(func() { close(q.started) }) }

// run runs the queued self-tests until ctx is done.
func (q *fleetQualifier) run(ctx context.Context) {
	select {
	case <-q.started:
	case <-ctx.Done():
		return
	}
	for {
		q.mu.Lock()
		var name string
		if len(q.queue) > 0 {
			name, q.queue = q.queue[0], q.queue[1:]
		}
		q.mu.Unlock()
		if name == "" {
			select {
			case <-q.more:
				continue
			case <-ctx.Done():
				return
			}
		}
		if err := q.selfTest(ctx, name); err != nil {
			if ctx.Err() != nil {
				return
			}
			q.log.Error("self-test of a template", "template", name, "err", err)
			q.mu.Lock()
			delete(q.tried, name)
			q.mu.Unlock()
		}
	}
}

// joinTokens answers the admin API's rotation with the join service.
type joinTokens struct{ js *join.Service }

func (j joinTokens) RotateJoinToken(ctx context.Context) (api.JoinToken, error) {
	token, expires, err := j.js.Rotate(ctx)
	if err != nil {
		return api.JoinToken{}, err
	}
	return api.JoinToken{Token: token, ExpiresAt: expires}, nil
}

// warnUnsharedSaves says, at start, that saves in a directory reach the
// other processes of a fleet only when they all mount the same one: a
// sandbox would wake only on the node it slept on, and imported images
// would reach no node.
func warnUnsharedSaves(cfg Config, log *slog.Logger) {
	if !strings.HasPrefix(cfg.Saves, "s3://") {
		log.Warn("saves are kept in a directory: a fleet shares them only if every node and the control plane mount the same one; use --saves s3://… (docs/fleet.md)", "saves", cfg.Saves)
	}
}
