package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"sync"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/netpolicy"
	"github.com/cove-dev/cove/internal/node"
	"github.com/cove-dev/cove/internal/node/gpu"
	"github.com/cove-dev/cove/internal/node/image"
	"github.com/cove-dev/cove/internal/node/local"
	"github.com/cove-dev/cove/internal/node/runtime"
	"github.com/cove-dev/cove/internal/node/saves"
)

// nodeSide is the node part of a process: the images it starts sandboxes
// from, the runtime, the fence, resolver and gateway, and the node that
// runs sandboxes. `cove serve` and `cove node` start one.
type nodeSide struct {
	cfg     Config
	log     *slog.Logger
	caCerts []byte
	gpus    *gpu.Devices
	node    *local.Node

	// mu guards templates: those the node can start now (it grows when
	// the managed image's build ends).
	mu        sync.Mutex
	templates map[string]image.Image

	// The network serves until close: its ctx is cancelled, then its
	// goroutines are waited for.
	stopNet context.CancelFunc
	netWG   sync.WaitGroup
}

// nodeHooks are what the node side reports to the control plane: command
// exits and network denials, and the gateway's counters.
type nodeHooks struct {
	onExit   node.ExitFunc
	denied   func(sandboxID string, o api.NetworkObservation, suppressed int64)
	injected func(sandboxID string, e netpolicy.InjectEvent)
	counters netpolicy.Counters
	// generation names a new save (local.Config.Generation); nil keeps the
	// node's default.
	generation func() string
	// fetchImage brings an imported image the node lacks
	// (local.Config.FetchImage); nil fetches none.
	fetchImage func(ctx context.Context, template string) error
}

// startNodeSide starts the node side over the templates found ready,
// binding the network's listeners into listeners. close undoes it.
func startNodeSide(ctx context.Context, cfg Config, templates map[string]image.Image, saveStore saves.Store, hooks nodeHooks, listeners Listeners, log *slog.Logger) (_ *nodeSide, err error) {
	n := &nodeSide{cfg: cfg, log: log, templates: maps.Clone(templates)}
	var nCerts int
	if n.caCerts, nCerts, err = loadCACerts(cfg.CACerts); err != nil {
		return nil, err
	}
	caBundles, err := writeCABundles(filepath.Join(cfg.DataDir, caBundlesSubdir), templates, n.caCerts, log)
	if err != nil {
		return nil, err
	}
	if nCerts > 0 {
		log.Info("sandboxes trust the operator's CA certificates", "from", cfg.CACerts, "certificates", nCerts,
			"templates", slices.Sorted(maps.Keys(caBundles)))
	}
	// inotify counts every sandbox as host root: raise its limits to the
	// node's size (runtime.RaiseInotifyLimits says why).
	if err := runtime.RaiseInotifyLimits(runtime.InotifySandboxes(), log); err != nil {
		return nil, err
	}
	// Every thread of every sandbox takes a process ID: raise the host's
	// kernel.pid_max (runtime.RaisePidMax says why).
	runtime.RaisePidMax(log)
	if n.gpus, err = gpu.Open(cfg.CDISpecDirs, cfg.GPUKind); err != nil {
		return nil, err
	}
	log.Info("gpus", "type", n.gpus.Kind(), "count", len(n.gpus.Names()), "cdi_spec_dirs", cfg.CDISpecDirs)
	rt, err := runtime.New(runtime.Config{
		StateDir:     filepath.Join(cfg.DataDir, "sandboxes"),
		RuncPath:     cfg.RuncPath,
		AgentPath:    cfg.AgentPath,
		CgroupParent: cfg.CgroupParent,
		Devices:      n.gpus,
	}, log)
	if err != nil {
		return nil, err
	}
	nodeCfg := local.Config{
		Templates:             templates,
		ImagesDir:             cfg.ImagesDir,
		DataDir:               cfg.DataDir,
		OutputDir:             filepath.Join(cfg.DataDir, "output"),
		OutputMaxBytes:        cfg.OutputMaxBytes,
		SandboxOutputMaxBytes: cfg.SandboxOutputMaxBytes,
		DiskOvercommit:        cfg.DiskOvercommit,
		DiskReserveBytes:      cfg.DiskReserveMiB << 20,
		Saves:                 saveStore,
		CABundles:             caBundles,
		SandboxCADir:          filepath.Join(cfg.DataDir, sandboxCABundlesSubdir),
		GPUs:                  n.gpus,
		GitDir:                filepath.Join(cfg.DataDir, "git"),
		MaxCloneBytes:         cfg.MaxCloneBytes,
		Generation:            hooks.generation,
		FetchImage:            hooks.fetchImage,
	}
	netCtx, stopNet := context.WithCancel(context.WithoutCancel(ctx))
	n.stopNet = stopNet
	defer func() {
		if err != nil {
			n.close()
		}
	}()
	var owners socketOwners
	if !cfg.Network.Disabled {
		mgr, err := startNetwork(netCtx, &n.netWG, cfg.Network, cfg.DataDir, hooks.denied, hooks.injected, n.caCerts, owners.lookup, hooks.counters, listeners, log)
		if err != nil {
			return nil, err
		}
		nodeCfg.Network = mgr
	}
	n.node = local.New(nodeCfg, rt, log, hooks.onExit)
	owners.node.Store(n.node)
	return n, nil
}

// addTemplate makes a template built after the start available.
func (n *nodeSide) addTemplate(img image.Image) {
	bundle, err := writeCABundle(filepath.Join(n.cfg.DataDir, caBundlesSubdir), img.Name, img, n.caCerts, n.log)
	if err != nil {
		n.log.Error("CA bundle of an image", "image", img.Name, "err", err)
	}
	n.node.AddTemplate(img.Name, img, bundle)
	n.mu.Lock()
	n.templates[img.Name] = img
	n.mu.Unlock()
}

// templateNames are the templates the node can start now.
func (n *nodeSide) templateNames() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Sorted(maps.Keys(n.templates))
}

// close stops recording and the network; sandboxes keep running.
func (n *nodeSide) close() {
	if n.node != nil {
		n.node.Close()
	}
	n.stopNet()
	n.netWG.Wait()
}

// openSaves opens the save store cfg names: <data-dir>/saves by default,
// or the directory or S3 bucket of cfg.Saves. The caller closes it.
func openSaves(ctx context.Context, cfg Config) (saves.Store, error) {
	if cfg.Saves == "" {
		if cfg.SavesCredentials != "" {
			return nil, errors.New("--saves-credentials: only an s3:// --saves takes credentials")
		}
		return saves.NewDir(filepath.Join(cfg.DataDir, "saves"))
	}
	st, err := saves.Open(ctx, cfg.Saves, cfg.SavesCredentials)
	if err != nil {
		return nil, fmt.Errorf("--saves: %w", err)
	}
	return st, nil
}
