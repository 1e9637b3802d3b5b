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
	"github.com/cove-dev/cove/internal/httpapi"
	"github.com/cove-dev/cove/internal/images"
	"github.com/cove-dev/cove/internal/node/gpu"
	"github.com/cove-dev/cove/internal/node/image"
	"github.com/cove-dev/cove/internal/node/local"
	"github.com/cove-dev/cove/internal/node/runtime"
	"github.com/cove-dev/cove/internal/node/saves"
	"github.com/cove-dev/cove/internal/secrets"
	"github.com/cove-dev/cove/internal/sources"
	"github.com/cove-dev/cove/internal/store/sqlite"
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
	if err := cfg.Validate(); err != nil {
		return err
	}
	if err := cfg.resolve(); err != nil {
		return err
	}
	if err := removeReady(cfg.ReadyFile); err != nil {
		return fmt.Errorf("remove a stale ready file: %w", err)
	}
	if _, err := os.Stat(cfg.AgentPath); err != nil {
		return fmt.Errorf("cove-agent not found at %s (build it with `make build`): %w", cfg.AgentPath, err)
	}
	// The state dirs must be searchable by the sandboxes' mapped root.
	for _, d := range []string{cfg.DataDir, filepath.Join(cfg.DataDir, "sandboxes"), cfg.ImagesDir} {
		if err := os.MkdirAll(d, 0o711); err != nil {
			return fmt.Errorf("create %s: %w", d, err)
		}
		if err := os.Chmod(d, 0o711); err != nil {
			return err
		}
	}
	st, err := sqlite.Open(ctx, filepath.Join(cfg.DataDir, "cove.db"))
	if err != nil {
		return err
	}
	defer st.Close()
	st.SetWebhookBacklog(cfg.Webhooks.Backlog)

	templates, building, err := loadTemplates(ctx, cfg, log)
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
	if cfg.Server.Secrets, err = loadSecretsKeys(cfg, log); err != nil {
		return err
	}
	caCerts, nCerts, err := loadCACerts(cfg.CACerts)
	if err != nil {
		return err
	}
	caBundles, err := writeCABundles(filepath.Join(cfg.DataDir, caBundlesSubdir), templates, caCerts, log)
	if err != nil {
		return err
	}
	if nCerts > 0 {
		log.Info("sandboxes trust the operator's CA certificates", "from", cfg.CACerts, "certificates", nCerts,
			"templates", slices.Sorted(maps.Keys(caBundles)))
	}

	// inotify counts every sandbox as host root: raise its limits to the
	// node's size (runtime.RaiseInotifyLimits says why).
	if err := runtime.RaiseInotifyLimits(runtime.InotifySandboxes(), log); err != nil {
		return err
	}
	gpus, err := gpu.Open(cfg.CDISpecDirs, cfg.GPUKind)
	if err != nil {
		return err
	}
	log.Info("gpus", "type", gpus.Kind(), "count", len(gpus.Names()), "cdi_spec_dirs", cfg.CDISpecDirs)
	rt, err := runtime.New(runtime.Config{
		StateDir:     filepath.Join(cfg.DataDir, "sandboxes"),
		RuncPath:     cfg.RuncPath,
		AgentPath:    cfg.AgentPath,
		CgroupParent: cfg.CgroupParent,
		Devices:      gpus,
	}, log)
	if err != nil {
		return err
	}
	metrics := telemetry.New(telemetry.SandboxCounts(st), log)
	timed := metrics.InstrumentStore(st)
	cfg.Server.WebhookAllowPrivate = cfg.Webhooks.AllowPrivate
	// Uploads arrive here, on the data disk; what an earlier run left
	// (it stopped mid-upload) is removed.
	cfg.Server.UploadDir = filepath.Join(cfg.DataDir, "uploads")
	if err := os.RemoveAll(cfg.Server.UploadDir); err != nil {
		return fmt.Errorf("remove leftover uploads: %w", err)
	}
	if err := os.Mkdir(cfg.Server.UploadDir, 0o700); err != nil {
		return fmt.Errorf("create %s: %w", cfg.Server.UploadDir, err)
	}
	plane, err := NewPlane(cfg.Server, timed, log)
	if err != nil {
		return err
	}
	srv := plane.Core
	srv.SetTelemetry(metrics)
	cfg.Webhooks.OpenSecret = plane.Webhooks.OpenSecret
	dispatcher, err := webhooks.New(cfg.Webhooks, timed, srv.Changes, metrics, log.With("component", "webhooks"))
	if err != nil {
		return err
	}
	plane.Templates.SetStates(tmplStates)
	saveStore, err := saves.NewDir(filepath.Join(cfg.DataDir, "saves"))
	if err != nil {
		return err
	}
	blobs, err := sources.NewBlobs(filepath.Join(cfg.DataDir, "assets"))
	if err != nil {
		return err
	}
	plane.Assets.SetBlobs(blobs)
	importer, err := images.NewImporter(cfg.ImagesDir, images.Policy{MaxBytes: 4 * cfg.ImageMaxMiB << 20}, cfg.ImageMaxMiB<<20, log.With("component", "images"))
	if err != nil {
		return err
	}
	plane.Images.SetImporter(importer)
	nodeCfg := local.Config{
		Templates:             templates,
		ImagesDir:             cfg.ImagesDir,
		OutputDir:             filepath.Join(cfg.DataDir, "output"),
		OutputMaxBytes:        cfg.OutputMaxBytes,
		SandboxOutputMaxBytes: cfg.SandboxOutputMaxBytes,
		DiskOvercommit:        cfg.DiskOvercommit,
		DiskReserveBytes:      cfg.DiskReserveMiB << 20,
		Saves:                 saveStore,
		CABundles:             caBundles,
		GPUs:                  gpus,
		GitDir:                filepath.Join(cfg.DataDir, "git"),
		MaxCloneBytes:         cfg.MaxCloneBytes,
	}
	// The network serves until Run returns: its ctx is cancelled, then
	// its goroutines are waited for.
	netCtx, stopNet := context.WithCancel(context.WithoutCancel(ctx))
	var netWG sync.WaitGroup
	defer netWG.Wait()
	defer stopNet()
	// Every listener binds before the API serves, so what they bound is
	// known (port 0 takes a free port) before it is reported.
	listeners := Listeners{}
	var owners socketOwners
	if !cfg.Network.Disabled {
		mgr, err := startNetwork(netCtx, &netWG, cfg.Network, cfg.DataDir, srv.NetworkDenied, owners.lookup, metrics, listeners, log)
		if err != nil {
			return err
		}
		nodeCfg.Network = mgr
	}
	nd := local.New(nodeCfg, rt, log, srv.OnExit)
	owners.node.Store(nd)
	plane.SetNode(nd)
	defer nd.Close()
	defer srv.Close()

	adminKey, err := plane.Teams.Bootstrap(ctx)
	if err != nil {
		return fmt.Errorf("create admin team: %w", err)
	}
	if adminKey != "" {
		if err := os.WriteFile(filepath.Join(cfg.DataDir, "admin-api-key"), []byte(adminKey+"\n"), 0o600); err != nil {
			return fmt.Errorf("write admin key: %w", err)
		}
	}
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
	if err := srv.Recover(ctx); err != nil {
		return fmt.Errorf("recover sandboxes: %w", err)
	}
	// Templates found ready are qualified before the API serves (once per
	// image: the result is kept beside it); a built one after its build.
	for _, name := range slices.Sorted(maps.Keys(templates)) {
		qualify(ctx, srv, tmplStates, cfg.ImagesDir, name, log)
	}
	srv.Start()
	// The dispatcher delivers until Run returns, and ends before the store
	// closes; what it did not deliver stays in the store's outbox.
	hookCtx, stopHooks := context.WithCancel(context.WithoutCancel(ctx))
	var hookWG sync.WaitGroup
	defer hookWG.Wait()
	defer stopHooks()
	hookWG.Go(func() { dispatcher.Run(hookCtx) })
	if building {
		// The managed image builds while the service serves; Run waits
		// for the build (cancelled) before it returns.
		bctx, stopBuild := context.WithCancel(context.WithoutCancel(ctx))
		var bwg sync.WaitGroup
		defer bwg.Wait()
		defer stopBuild()
		bwg.Go(func() {
			buildManaged(bctx, cfg, tmplStates, progress, log, func(img image.Image) {
				bundle, err := writeCABundle(filepath.Join(cfg.DataDir, caBundlesSubdir), img.Name, img, caCerts, log)
				if err != nil {
					log.Error("CA bundle of the managed image", "err", err)
				}
				nd.AddTemplate(img.Name, img, bundle)
			})
			srv.TemplatesChanged()
			if t, _ := tmplStates.Get(image.ManagedName); t.Status == api.TemplateReady {
				qualify(bctx, srv, tmplStates, cfg.ImagesDir, image.ManagedName, log)
			}
		})
	}

	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("API: %w", err)
	}
	listeners["api"] = ln.Addr().String()
	if cfg.MetricsListen != "" {
		mln, err := net.Listen("tcp", cfg.MetricsListen)
		if err != nil {
			ln.Close()
			return fmt.Errorf("metrics: %w", err)
		}
		listeners["metrics"] = mln.Addr().String()
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", metrics.Handler())
		ms := newHTTPServer(cfg.HTTP, mux, context.WithoutCancel(ctx))
		served := make(chan struct{})
		go func() {
			defer close(served)
			ms.Serve(mln) // ends at Close, below
		}()
		defer func() {
			ms.Close()
			<-served
		}()
	}
	api := plane.Handler(log)
	api.LimitUploads(cfg.HTTP.UploadIdleTimeout)
	pln, err := servePreviews(cfg.Preview, plane.Previews, api, ln, listeners)
	if err != nil {
		ln.Close()
		return err
	}
	api.ReportListeners(listeners)
	api.LimitEventStreams(cfg.HTTP.MaxEventStreamsPerTeam)
	api.ServeMetrics(metrics.Handler())
	var handler http.Handler = api
	if !cfg.NoConsole {
		c := console.New(api)
		c.Pass = api.IsPreview
		handler = c
	}
	hs := newHTTPServer(cfg.HTTP, metrics.Middleware(handler), context.WithoutCancel(ctx))
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	if pln != nil {
		phs := newHTTPServer(cfg.HTTP, api.PreviewHandler(), context.WithoutCancel(ctx))
		perrc := make(chan error, 1)
		go func() { perrc <- phs.Serve(pln) }()
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := phs.Shutdown(sctx); err != nil {
				phs.Close()
			}
			<-perrc
		}()
	}
	log.Info("serving", "addr", ln.Addr().String(), "data_dir", cfg.DataDir, "ready_file", cfg.ReadyFile)
	if err := writeReady(cfg.ReadyFile, Ready{PID: os.Getpid(), Listeners: listeners}); err != nil {
		hs.Close()
		<-errc
		return fmt.Errorf("write the ready file: %w", err)
	}
	if ready != nil {
		ready(Started{AdminKey: adminKey, Listeners: listeners})
	}

	select {
	case err := <-errc:
		removeReady(cfg.ReadyFile) // best effort: the next start removes it too
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down; sandboxes keep running")
	if err := removeReady(cfg.ReadyFile); err != nil {
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
// serves.
func loadTemplates(ctx context.Context, cfg Config, log *slog.Logger) (_ map[string]image.Image, building bool, _ error) {
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
	if _, ok := templates[cfg.Server.DefaultTemplate]; !ok && !(building && cfg.Server.DefaultTemplate == image.ManagedName) {
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
