// Package service assembles `cove serve`: the data dir, the store, the
// images, the node and the control plane behind the HTTP API, with a
// graceful shutdown. Sandboxes outlive the service; the next start
// reattaches to them.
package service

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/cove-dev/cove/internal/httpapi"
	"github.com/cove-dev/cove/internal/node/local"
	"github.com/cove-dev/cove/internal/node/image"
	"github.com/cove-dev/cove/internal/node/runtime"
	"github.com/cove-dev/cove/internal/node/saves"
	"github.com/cove-dev/cove/internal/server"
	"github.com/cove-dev/cove/internal/store/sqlite"
)

// Config is the configuration of `cove serve`.
type Config struct {
	// Listen is the API's TCP address. Default 127.0.0.1:7070.
	Listen string
	// DataDir holds the database, sandbox state and recorded output.
	// Default /var/lib/cove.
	DataDir string
	// ImagesDir holds the images; default <DataDir>/images.
	ImagesDir string
	// BuildManaged builds the managed image when it is missing.
	BuildManaged bool
	// DefaultTemplate is the template of requests that name none.
	// Default "managed".
	DefaultTemplate string
	// AgentPath is the cove-agent binary; default cove-agent beside the
	// running executable.
	AgentPath string
	// RuncPath is the OCI runtime; default "runc" from PATH.
	RuncPath string
	// CgroupParent holds every sandbox's cgroup. Default "/cove".
	CgroupParent string
	// OutputMaxBytes caps one command's recorded output. Default 4 GiB.
	OutputMaxBytes int64
	// Server is the control plane's own configuration (resources, limits).
	Server server.Config
	// Network is the node's fence, resolver and gateway.
	Network NetworkConfig
}

func (c *Config) setDefaults() error {
	if c.Listen == "" {
		c.Listen = "127.0.0.1:7070"
	}
	if c.DataDir == "" {
		c.DataDir = "/var/lib/cove"
	}
	abs, err := filepath.Abs(c.DataDir)
	if err != nil {
		return err
	}
	c.DataDir = abs
	if c.ImagesDir == "" {
		c.ImagesDir = filepath.Join(c.DataDir, "images")
	}
	if c.ImagesDir, err = filepath.Abs(c.ImagesDir); err != nil {
		return err
	}
	if c.DefaultTemplate == "" {
		c.DefaultTemplate = image.ManagedName
	}
	if c.AgentPath == "" {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("find own executable: %w", err)
		}
		c.AgentPath = filepath.Join(filepath.Dir(exe), "cove-agent")
	}
	if c.OutputMaxBytes == 0 {
		c.OutputMaxBytes = 4 << 30
	}
	return nil
}

// Run serves until ctx is done, then shuts down gracefully. ready, when not
// nil, is called with the admin key if this start created one ("" else)
// once the API is being served.
func Run(ctx context.Context, cfg Config, log *slog.Logger, progress io.Writer, ready func(adminKey string)) error {
	if err := cfg.setDefaults(); err != nil {
		return err
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

	templates, err := loadTemplates(ctx, cfg, progress, log)
	if err != nil {
		return err
	}
	cfg.Server.Templates = templates
	cfg.Server.DefaultTemplate = cfg.DefaultTemplate

	rt, err := runtime.New(runtime.Config{
		StateDir:     filepath.Join(cfg.DataDir, "sandboxes"),
		RuncPath:     cfg.RuncPath,
		AgentPath:    cfg.AgentPath,
		CgroupParent: cfg.CgroupParent,
	}, log)
	if err != nil {
		return err
	}
	srv, err := server.New(cfg.Server, st, log)
	if err != nil {
		return err
	}
	saveStore, err := saves.NewDir(filepath.Join(cfg.DataDir, "saves"))
	if err != nil {
		return err
	}
	nodeCfg := local.Config{
		OutputDir:      filepath.Join(cfg.DataDir, "output"),
		OutputMaxBytes: cfg.OutputMaxBytes,
		Saves:          saveStore,
	}
	// The network serves until Run returns: its ctx is cancelled, then
	// its goroutines are waited for.
	netCtx, stopNet := context.WithCancel(context.WithoutCancel(ctx))
	var netWG sync.WaitGroup
	defer netWG.Wait()
	defer stopNet()
	if !cfg.Network.Disabled {
		mgr, err := startNetwork(netCtx, &netWG, cfg.Network, cfg.DataDir, srv.NetworkDenied, log)
		if err != nil {
			return err
		}
		nodeCfg.Network = mgr
	}
	nd := local.New(nodeCfg, rt, log, srv.OnExit)
	srv.SetNode(nd)
	defer nd.Close()
	defer srv.Close()

	adminKey, err := srv.Bootstrap(ctx)
	if err != nil {
		return fmt.Errorf("create admin team: %w", err)
	}
	if adminKey != "" {
		if err := os.WriteFile(filepath.Join(cfg.DataDir, "admin-api-key"), []byte(adminKey+"\n"), 0o600); err != nil {
			return fmt.Errorf("write admin key: %w", err)
		}
	}
	if err := srv.Recover(ctx); err != nil {
		return fmt.Errorf("recover sandboxes: %w", err)
	}
	srv.Start()

	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return err
	}
	hs := &http.Server{
		Handler:           httpapi.New(srv, log),
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	log.Info("serving", "addr", ln.Addr().String(), "data_dir", cfg.DataDir)
	if ready != nil {
		ready(adminKey)
	}

	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down; sandboxes keep running")
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

// loadTemplates loads every image in the images dir, building the managed
// one first when it is missing and allowed.
func loadTemplates(ctx context.Context, cfg Config, progress io.Writer, log *slog.Logger) (map[string]image.Image, error) {
	templates := map[string]image.Image{}
	if cfg.BuildManaged {
		if _, err := image.Load(cfg.ImagesDir, image.ManagedName); err != nil {
			fmt.Fprintf(progress, "building the managed image in %s (once; this takes a minute or two)\n", cfg.ImagesDir)
		}
		img, err := image.EnsureManaged(ctx, cfg.ImagesDir, image.IDMap{}, progress, log)
		if err != nil {
			return nil, fmt.Errorf("managed image: %w", err)
		}
		templates[img.Name] = img
	}
	entries, err := os.ReadDir(cfg.ImagesDir)
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		img, err := image.Load(cfg.ImagesDir, e.Name())
		if err != nil {
			continue // a half-built or foreign directory
		}
		templates[img.Name] = img
	}
	if _, ok := templates[cfg.DefaultTemplate]; !ok {
		return nil, fmt.Errorf("default template %q has no image in %s", cfg.DefaultTemplate, cfg.ImagesDir)
	}
	return templates, nil
}
