// Package service assembles `cove serve`: the data dir, the store, the
// images, the node and the control plane behind the HTTP API, with a
// graceful shutdown. Sandboxes outlive the service; the next start
// reattaches to them.
package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/console"
	"github.com/cove-dev/cove/internal/control/lifecycle"
	"github.com/cove-dev/cove/internal/control/previews"
	"github.com/cove-dev/cove/internal/fsspread"
	"github.com/cove-dev/cove/internal/httpapi"
	"github.com/cove-dev/cove/internal/images"
	"github.com/cove-dev/cove/internal/node/image"
	"github.com/cove-dev/cove/internal/node/local"
	"github.com/cove-dev/cove/internal/node/saves"
	"github.com/cove-dev/cove/internal/secrets"
	"github.com/cove-dev/cove/internal/sources"
	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/internal/store/open"
	"github.com/cove-dev/cove/internal/telemetry"
	tmplstate "github.com/cove-dev/cove/internal/templates"
	"github.com/cove-dev/cove/internal/webhooks"
)

// Started is what Run tells its caller once the API is being served.
type Started struct {
	// AdminKey is the admin team's key if this start created it, "" else.
	AdminKey string
	// Listeners are the addresses bound (ports chosen when 0 was asked).
	Listeners Listeners
}

// The node in this process is the one the control plane talks to.
var _ lifecycle.Node = (*local.Node)(nil)

// Run serves until ctx is done, then shuts down gracefully. Once the API
// is being served it writes cfg.ReadyFile and calls ready, when not nil;
// a graceful stop removes the ready file.
func Run(ctx context.Context, cfg Config, log *slog.Logger, progress io.Writer, ready func(Started)) error {
	if err := prepareDirs(&cfg, true); err != nil {
		return err
	}
	templates, building, err := loadTemplates(ctx, cfg, log, true)
	if err != nil {
		return err
	}
	tmplStates := tmplstate.New()
	for name := range templates {
		tmplStates.Set(api.Template{Name: name, Kind: "managed", Status: api.TemplateReady})
	}
	cfg.Server.Templates = slices.Sorted(maps.Keys(templates))
	if building {
		tmplStates.Set(api.Template{Name: image.ManagedName, Kind: "managed", Status: api.TemplateBuilding, Progress: "waiting to start"})
		cfg.Server.Templates = append(cfg.Server.Templates, image.ManagedName)
		slices.Sort(cfg.Server.Templates)
	}
	ps, err := openPlaneSide(ctx, cfg, tmplStates, log)
	if err != nil {
		return err
	}
	defer ps.close()
	srv := ps.plane.Core
	saveStore, err := openSaves(ctx, cfg)
	if err != nil {
		return err
	}
	defer saveStore.Close()
	if cfg.Saves != "" {
		ps.shareAssets(saveStore)
	}
	// Imported images keep their parts, by digest, in the save store as
	// in `cove control`: a move to a fleet (cove admin migrate-store)
	// takes them from there.
	ps.importer.SetBlobs(saveStore)
	// Every listener binds before the API serves, so what they bound is
	// known (port 0 takes a free port) before it is reported.
	listeners := Listeners{}
	ns, err := startNodeSide(ctx, cfg, templates, saveStore, nodeHooks{
		onExit: srv.OnExit, denied: srv.NetworkDenied, injected: srv.NetworkInjected, counters: ps.metrics,
	}, listeners, log)
	if err != nil {
		return err
	}
	defer ns.close()
	ps.plane.SetNode(ns.node)
	ps.nodeReady = ns.readyChecks()
	defer srv.Close()

	if err := ps.prepare(ctx); err != nil {
		return err
	}
	if err := srv.Recover(ctx); err != nil {
		return fmt.Errorf("recover sandboxes: %w", err)
	}
	// Templates found ready are qualified before the API serves (once per
	// image: the result is kept beside it); a built one after its build.
	for _, name := range slices.Sorted(maps.Keys(templates)) {
		qualify(ctx, srv, tmplStates, cfg.ImagesDir, name, log)
	}
	srv.StartReplica()
	stopReplica := ps.runReplica(ctx)
	defer stopReplica()
	if building {
		// The managed image builds while the service serves; Run waits
		// for the build (cancelled) before it returns.
		bctx, stopBuild := context.WithCancel(context.WithoutCancel(ctx))
		var bwg sync.WaitGroup
		defer bwg.Wait()
		defer stopBuild()
		bwg.Go(func() {
			buildManaged(bctx, cfg, tmplStates, progress, log, ns.addTemplate)
			srv.TemplatesChanged()
			if t, _ := tmplStates.Get(image.ManagedName); t.Status == api.TemplateReady {
				qualify(bctx, srv, tmplStates, cfg.ImagesDir, image.ManagedName, log)
			}
		})
	}
	return ps.serve(ctx, listeners, nil, ready)
}

// prepareDirs checks cfg, makes its paths absolute, removes a stale ready
// file and creates the data dirs. withNode: the process runs sandboxes.
func prepareDirs(cfg *Config, withNode bool) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if err := cfg.resolve(); err != nil {
		return err
	}
	if err := removeReady(cfg.ReadyFile); err != nil {
		return fmt.Errorf("remove a stale ready file: %w", err)
	}
	dirs := []string{cfg.DataDir}
	if withNode {
		if _, err := os.Stat(cfg.AgentPath); err != nil {
			return fmt.Errorf("cove-agent not found at %s (build it with `make build`): %w", cfg.AgentPath, err)
		}
		dirs = append(dirs, filepath.Join(cfg.DataDir, "sandboxes"), cfg.ImagesDir)
	}
	// The state dirs must be searchable by the sandboxes' mapped root.
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o711); err != nil {
			return fmt.Errorf("create %s: %w", d, err)
		}
		if err := os.Chmod(d, 0o711); err != nil {
			return err
		}
		if d == cfg.DataDir {
			// Its directories (made from now on) each go where few
			// directories are, not beside the data dir's parent's.
			_ = fsspread.Subdirs(d) // elsewhere the filesystem places them itself
		}
	}
	return nil
}

// backlogBounded is a store that bounds each team's webhook backlog
// (both stores do).
type backlogBounded interface{ SetWebhookBacklog(n int) }

// planeSide is the control plane part of a process: the store, the
// services, the webhooks' dispatcher and the API. `cove serve` and
// `cove control` open one.
type planeSide struct {
	cfg        Config
	log        *slog.Logger
	st         store.Store
	metrics    *telemetry.Metrics
	plane      *Plane
	dispatcher *webhooks.Dispatcher
	// replica is this process among the replicas sharing the store.
	replica  *replica
	adminKey string
	closers  []func()
	// importer stores imported images under the images dir and
	// publishes their parts to the save store (SetBlobs).
	importer *images.Importer
	// assetBlobs keeps assets' bytes in the data dir; with a save store
	// configured it is only the staging area and cache of shareAssets.
	assetBlobs *sources.Blobs
	// nodeReady are the node's GET /readyz checks in a process with a
	// node; nil in `cove control`.
	nodeReady map[string]httpapi.ReadyCheck
}

// openPlaneSide opens the store and builds the control plane's services;
// the caller gives it a node (plane.SetNode) before prepare.
func openPlaneSide(ctx context.Context, cfg Config, tmplStates *tmplstate.Registry, log *slog.Logger) (_ *planeSide, err error) {
	st, err := open.Open(ctx, cfg.StoreURL(), log.With("component", "store"))
	if err != nil {
		return nil, err
	}
	ps := &planeSide{cfg: cfg, log: log, st: st}
	ps.closers = append(ps.closers, func() { st.Close() })
	defer func() {
		if err != nil {
			ps.close()
		}
	}()
	if b, ok := st.(backlogBounded); ok {
		b.SetWebhookBacklog(cfg.Webhooks.Backlog)
	}
	if cfg.Server.Secrets, err = loadSecretsKeys(cfg, log); err != nil {
		return nil, err
	}
	ps.cfg.Server.Secrets = cfg.Server.Secrets
	ps.metrics = telemetry.New(telemetry.SandboxCounts(st), log)
	timed := ps.metrics.InstrumentStore(st)
	cfg.Server.WebhookAllowPrivate = cfg.Webhooks.AllowPrivate
	if cfg.E2B.enabled() {
		// E2B's creates run sudo (SetID): the warm pool keeps as many
		// of them ready as of cove's own.
		cfg.Server.WarmPoolSetID = cfg.Server.WarmPool
	}
	// Uploads arrive here, on the data disk; what an earlier run left
	// (it stopped mid-upload) is removed.
	cfg.Server.UploadDir = filepath.Join(cfg.DataDir, "uploads")
	if err := os.RemoveAll(cfg.Server.UploadDir); err != nil {
		return nil, fmt.Errorf("remove leftover uploads: %w", err)
	}
	if err := os.Mkdir(cfg.Server.UploadDir, 0o700); err != nil {
		return nil, fmt.Errorf("create %s: %w", cfg.Server.UploadDir, err)
	}
	if ps.plane, err = NewPlane(cfg.Server, timed, log); err != nil {
		return nil, err
	}
	ps.plane.Core.SetTelemetry(ps.metrics)
	// A store that carries notifications between processes (PostgreSQL)
	// may be shared by replicas: their changes wake each other's waiters.
	notes, _ := any(st).(notifier)
	if ps.replica, err = newReplica(st, cfg.LeaseTTL, notes, ps.plane.Core.Wake, log); err != nil {
		return nil, err
	}
	if notes != nil {
		// Only such a store is shared: on SQLite this process is alone,
		// and a previous run that crashed a moment ago is no other
		// replica whose transitions or node state Recover must spare.
		ps.plane.Core.SetAnnounce(ps.replica.announce)
		ps.plane.Core.SetReplicas(ps.replica)
		// An Idempotency-Key claimed by a replica that died is taken
		// over by the retry; one claimed by a live one is in flight.
		ps.plane.Teams.SetReplica(ps.replica.ReplicaID(), ps.replica.Alive)
	}
	ps.metrics.ObserveReplica(ps.replica)
	cfg.Webhooks.OpenSecret = ps.plane.Webhooks.OpenSecret
	if ps.dispatcher, err = webhooks.New(cfg.Webhooks, timed, ps.plane.Core.Changes, ps.metrics, log.With("component", "webhooks")); err != nil {
		return nil, err
	}
	ps.plane.Templates.SetStates(tmplStates)
	blobs, err := sources.NewBlobs(filepath.Join(cfg.DataDir, "assets"))
	if err != nil {
		return nil, err
	}
	ps.plane.Assets.SetBlobs(blobs)
	ps.assetBlobs = blobs
	if err := os.MkdirAll(cfg.ImagesDir, 0o711); err != nil {
		return nil, fmt.Errorf("create %s: %w", cfg.ImagesDir, err)
	}
	importer, err := images.NewImporter(cfg.ImagesDir, images.Policy{MaxBytes: 4 * cfg.ImageMaxMiB << 20}, cfg.ImageMaxMiB<<20, log.With("component", "images"))
	if err != nil {
		return nil, err
	}
	ps.plane.Images.SetImporter(importer)
	ps.importer = importer
	return ps, nil
}

// shareAssets keeps assets' bytes in the save store, by digest, where
// every replica (and `cove admin migrate-store`) finds them; the data
// dir's copy is only a cache.
func (ps *planeSide) shareAssets(st saves.Blobs) {
	ps.plane.Assets.SetBlobs(sources.NewShared(ps.assetBlobs, st))
}

// prepare makes the admin team at the first start and seals what an older
// database kept in clear, before the sandboxes are recovered.
func (ps *planeSide) prepare(ctx context.Context) error {
	cfg, plane, log := ps.cfg, ps.plane, ps.log
	adminKey, err := plane.Teams.Bootstrap(ctx)
	if err != nil {
		return fmt.Errorf("create admin team: %w", err)
	}
	if adminKey != "" {
		if err := os.WriteFile(filepath.Join(cfg.DataDir, "admin-api-key"), []byte(adminKey+"\n"), 0o600); err != nil {
			return fmt.Errorf("write admin key: %w", err)
		}
	}
	ps.adminKey = adminKey
	// Before Recover, which opens secrets for the sandboxes it reattaches.
	if n, err := plane.Vault.Rekey(ctx); err != nil {
		return fmt.Errorf("secrets: %w", err)
	} else if n > 0 {
		log.Info("secrets sealed again under the current key; the old key files are no longer needed", "secrets", n, "key_id", cfg.Server.Secrets.CurrentID())
	}
	// Before the dispatcher and the API: no webhook secret is left in
	// clear (a database from before they were sealed) once serving.
	if n, err := plane.Webhooks.SealSecrets(ctx); err != nil {
		return fmt.Errorf("webhook secrets: %w", err)
	} else if n > 0 {
		log.Info("webhook secrets sealed under the current key", "webhooks", n, "key_id", cfg.Server.Secrets.CurrentID())
	}
	return nil
}

// runReplica runs this replica's part among those sharing the store until
// the returned stop, which waits for it: beats, change notifications, and
// under the leader lease the singletons (the core's, the webhook
// dispatcher, and each of also). It ends before the store closes; what
// the dispatcher did not deliver stays in the store's outbox.
func (ps *planeSide) runReplica(ctx context.Context, also ...func(ctx context.Context)) (stop func()) {
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Go(func() {
		ps.replica.run(rctx, func(ctx context.Context) {
			var lead sync.WaitGroup
			defer lead.Wait()
			lead.Go(func() { ps.plane.Core.Lead(ctx) })
			lead.Go(func() { ps.dispatcher.Run(ctx) })
			for _, fn := range also {
				lead.Go(func() { fn(ctx) })
			}
		})
	})
	return func() {
		cancel()
		wg.Wait()
	}
}

func (ps *planeSide) close() {
	for i := len(ps.closers) - 1; i >= 0; i-- {
		ps.closers[i]()
	}
}

// serve serves the API (and the console, metrics and previews listeners
// cfg asks for) until ctx is done, then shuts down gracefully. extra, when
// not nil, is served beside it and shut down with it (the fleet's node
// listener). Once serving it writes the ready file and calls ready.
func (ps *planeSide) serve(ctx context.Context, listeners Listeners, extra []*servedListener, ready func(Started)) error {
	cfg, plane, log, metrics := ps.cfg, ps.plane, ps.log, ps.metrics
	apiTLS, err := loadTLS(cfg.TLS, log)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("API: %w", err)
	}
	listeners["api"] = ln.Addr().String()
	warnPlain(log, "api", ln, apiTLS, "--tls-cert and --tls-key")
	ps.replica.setAddr(ln.Addr().String())
	if cfg.MetricsListen != "" {
		mln, err := net.Listen("tcp", cfg.MetricsListen)
		if err != nil {
			ln.Close()
			return fmt.Errorf("metrics: %w", err)
		}
		listeners["metrics"] = mln.Addr().String()
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", metrics.Handler())
		extra = append(extra, &servedListener{ln: mln, srv: newHTTPServer(cfg.HTTP, mux, context.WithoutCancel(ctx))})
	}
	e2bListeners, err := ps.serveE2B(ctx, listeners)
	if err != nil {
		ln.Close()
		return err
	}
	extra = append(extra, e2bListeners...)
	api := plane.Handler(log)
	api.LimitUploads(cfg.HTTP.UploadIdleTimeout)
	pln, err := servePreviews(cfg.Preview, plane.Previews, api, ln, listeners)
	if err != nil {
		ln.Close()
		return err
	}
	if pln != nil {
		previewTLS, err := loadTLS(cfg.Preview.TLS, log)
		if err != nil {
			ln.Close()
			pln.Close()
			return err
		}
		warnPlain(log, "preview", pln, previewTLS, "--preview-tls-cert and --preview-tls-key")
		psrv := newHTTPServer(cfg.HTTP, api.PreviewHandler(), context.WithoutCancel(ctx))
		psrv.TLSConfig = previewTLS
		extra = append(extra, &servedListener{ln: pln, srv: psrv})
	}
	api.ReportListeners(listeners)
	api.LimitEventStreams(cfg.HTTP.MaxEventStreamsPerTeam)
	api.LimitWatchStreams(cfg.HTTP.MaxWatchStreamsPerTeam)
	api.ServeMetrics(metrics.Handler())
	api.Replica = ps.replica
	api.Ready = ps.readyChecks(ps.nodeReady)
	if ps.nodeReady != nil {
		api.NameDataDisk(fmt.Sprintf("the node's data disk (%s)", cfg.DataDir))
	} else {
		api.NameDataDisk(fmt.Sprintf("the control plane's data disk (%s)", cfg.DataDir))
	}
	var handler http.Handler = api
	if !cfg.NoConsole {
		c := console.New(api)
		c.Pass = api.IsPreview
		handler = c
	}
	for _, e := range extra {
		e.start()
		defer e.stop()
	}
	// Requests outlive ctx, so a stop lets them finish; what still runs
	// streamGrace after the stop began (followed output, event streams,
	// attached terminals: their clients resume) is ended then.
	base, cancelBase := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelBase()
	hs := newHTTPServer(cfg.HTTP, metrics.Middleware(handler), base)
	hs.TLSConfig = apiTLS
	hs.RegisterOnShutdown(func() { time.AfterFunc(streamGrace, cancelBase) })
	errc := make(chan error, 1)
	go func() { errc <- serveHTTP(hs, ln) }()
	log.Info("serving", "addr", ln.Addr().String(), "tls", apiTLS != nil, "public_url", cfg.PublicURL, "data_dir", cfg.DataDir, "ready_file", cfg.ReadyFile)
	if err := writeReady(cfg.ReadyFile, Ready{PID: os.Getpid(), Listeners: listeners}); err != nil {
		hs.Close()
		<-errc
		return fmt.Errorf("write the ready file: %w", err)
	}
	if ready != nil {
		ready(Started{AdminKey: ps.adminKey, Listeners: listeners})
	}
	return awaitStop(ctx, cfg.ReadyFile, hs, errc, log)
}

// streamGrace is how long a stop waits for requests before it ends those
// that still run.
const streamGrace = 2 * time.Second

// awaitStop waits for ctx (or the server's end), then removes the ready
// file and shuts the server down gracefully.
func awaitStop(ctx context.Context, readyFile string, hs *http.Server, errc <-chan error, log *slog.Logger) error {
	select {
	case err := <-errc:
		removeReady(readyFile) // best effort: the next start removes it too
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down; sandboxes keep running")
	if err := removeReady(readyFile); err != nil {
		log.Warn("remove the ready file", "err", err)
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		hs.Close()
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// servedListener is a listener served beside the API and shut down with
// it (previews, metrics, the fleet's node listener).
type servedListener struct {
	ln   net.Listener
	srv  *http.Server
	errc chan error
}

func (s *servedListener) start() {
	s.errc = make(chan error, 1)
	go func() { s.errc <- serveHTTP(s.srv, s.ln) }()
}

func (s *servedListener) stop() {
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.srv.Shutdown(sctx); err != nil {
		s.srv.Close()
	}
	<-s.errc
}

// loadSecretsKeys reads the key that seals teams' secrets, making the
// default one at the first start, and the old keys of a rotation.
func loadSecretsKeys(cfg Config, log *slog.Logger) (*secrets.Keyring, error) {
	var cur *secrets.Key
	var err error
	if cfg.SecretsKeyFile == "" {
		path := filepath.Join(cfg.DataDir, "secrets.key")
		var made bool
		if cur, made, err = secrets.LoadOrCreateKey(path); err != nil {
			return nil, err
		}
		if made {
			log.Info("made the secrets key; back it up: without it, stored secrets cannot be read", "path", path, "key_id", cur.ID)
		}
	} else if cur, err = secrets.LoadKey(cfg.SecretsKeyFile); err != nil {
		return nil, err
	}
	var old []*secrets.Key
	for _, p := range cfg.SecretsOldKeyFiles {
		k, err := secrets.LoadKey(p)
		if err != nil {
			return nil, err
		}
		old = append(old, k)
	}
	return secrets.NewKeyring(cur, old...), nil
}

// newHTTPServer is the API's server under the bounds of cfg (see
// HTTPConfig for why there is no ReadTimeout or WriteTimeout); requests'
// contexts derive from base.
func newHTTPServer(cfg HTTPConfig, h http.Handler, base context.Context) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		IdleTimeout:       cfg.IdleTimeout,
		MaxHeaderBytes:    cfg.MaxHeaderBytes,
		BaseContext:       func(net.Listener) context.Context { return base },
	}
}

// loadTemplates loads every image in the images dir, converting images of
// the first format (their IDs shifted); building says that the managed
// image is missing and is to be built (buildManaged) while the service
// serves. requireDefault fails when the default template has no image (a
// node alone has no default template).
func loadTemplates(ctx context.Context, cfg Config, log *slog.Logger, requireDefault bool) (_ map[string]image.Image, building bool, _ error) {
	templates := map[string]image.Image{}
	converted, err := image.Convert(ctx, cfg.ImagesDir, log)
	if err != nil {
		return nil, false, err
	}
	if len(converted) > 0 {
		log.Info("converted images to the format with their own IDs", "images", converted)
	}
	if cfg.BuildManaged {
		_, err := image.Load(cfg.ImagesDir, image.ManagedName)
		building = err != nil
		// A managed image built from another package list (an older
		// cove's) is built again, and serves no sandbox until then.
		if !building && cfg.ManagedBuilder != "busybox" && !image.Current(cfg.ImagesDir, image.ManagedName, image.ManagedRecipe()) {
			log.Info("the managed image was built from another recipe; building it again", "recipe", image.ManagedRecipe())
			building = true
		}
	}
	imgs, err := image.List(cfg.ImagesDir)
	if err != nil {
		return nil, false, err
	}
	for _, img := range imgs {
		templates[img.Name] = img
	}
	if building {
		delete(templates, image.ManagedName)
	}
	if _, ok := templates[cfg.Server.DefaultTemplate]; requireDefault && !ok && !(building && cfg.Server.DefaultTemplate == image.ManagedName) {
		return nil, false, fmt.Errorf("default template %q has no image in %s", cfg.Server.DefaultTemplate, cfg.ImagesDir)
	}
	return templates, building, nil
}

// buildManaged builds the managed image, reporting its progress in the
// templates' state (and to progress), and hands the image to ready.
func buildManaged(ctx context.Context, cfg Config, states *tmplstate.Registry, progress io.Writer, log *slog.Logger, ready func(image.Image)) {
	name := image.ManagedName
	fmt.Fprintf(progress, "building the managed image in %s in the background (once; this takes a minute or two); sandboxes of it answer 503 until it is ready\n", cfg.ImagesDir)
	w := io.MultiWriter(progress, &tmplstate.Progress{R: states, Name: name})
	states.Update(name, func(t *api.Template) { t.Progress = "starting the build" })
	var img image.Image
	var err error
	switch cfg.ManagedBuilder {
	case "busybox":
		img, err = image.BuildBusyboxHeld(ctx, cfg.ImagesDir, name, w, filepath.Join(cfg.ImagesDir, ".managed.hold"), log)
	default:
		img, err = image.EnsureManaged(ctx, cfg.ImagesDir, w, log)
	}
	if err != nil {
		log.Error("the managed image could not be built", "err", err)
		states.Update(name, func(t *api.Template) {
			t.Status, t.Progress = api.TemplateFailed, ""
			t.Reason = "the build failed; the server log has the details"
		})
		return
	}
	ready(img)
	states.Update(name, func(t *api.Template) { t.Status, t.Progress = api.TemplateReady, "" })
	log.Info("the managed image is ready", "dir", filepath.Join(cfg.ImagesDir, name))
}

// servePreviews binds the previews' own listener when one is asked for,
// and tells the control plane and the API where previews are: a domain
// without a port takes the port of the listener that serves them.
func servePreviews(cfg PreviewConfig, pv *previews.Service, h *httpapi.Handler, apiLn net.Listener, listeners Listeners) (net.Listener, error) {
	var pln net.Listener
	served := apiLn
	if cfg.Listen != "" {
		var err error
		if pln, err = net.Listen("tcp", cfg.Listen); err != nil {
			return nil, fmt.Errorf("previews: %w", err)
		}
		listeners["preview"] = pln.Addr().String()
		served = pln
	}
	domain := cfg.Domain
	if _, _, err := net.SplitHostPort(domain); err != nil {
		_, port, _ := net.SplitHostPort(served.Addr().String())
		domain = net.JoinHostPort(domain, port)
	}
	pv.SetURLs(previews.URLs{Domain: domain, Scheme: cfg.Scheme})
	h.ServePreviews(domain, cfg.Scheme)
	return pln, nil
}

// selfTestFile keeps a template's self-test beside its image: an image is
// qualified once, and a rebuilt image (a new directory) again.
const selfTestFile = "self-test.json"

// qualify records the template's self-test in its state: the one kept
// beside its image, or a new one run now (and kept).
func qualify(ctx context.Context, srv *lifecycle.Core, states *tmplstate.Registry, imagesDir, name string, log *slog.Logger) {
	img, err := image.Load(imagesDir, name)
	if err != nil {
		log.Error("self-test of a template", "template", name, "err", err)
		return
	}
	path := filepath.Join(img.Dir, selfTestFile)
	var st api.SelfTest
	b, err := os.ReadFile(path)
	if err == nil && json.Unmarshal(b, &st) == nil && st.Results != nil {
		states.Update(name, func(t *api.Template) { t.Qualified, t.SelfTest = len(st.Failures) == 0, &st })
		return
	}
	st, err = srv.SelfTest(ctx, name)
	if err != nil {
		log.Error("self-test of a template", "template", name, "err", err)
		return
	}
	log.Info("template self-tested", "template", name, "failures", st.Failures)
	states.Update(name, func(t *api.Template) { t.Qualified, t.SelfTest = len(st.Failures) == 0, &st })
	if b, err := json.MarshalIndent(st, "", "  "); err == nil {
		if err := writePublicFile(path, append(b, '\n')); err != nil {
			log.Warn("keep a template's self-test", "template", name, "err", err)
		}
	}
}
