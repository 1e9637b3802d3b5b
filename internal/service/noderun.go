package service

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/fleet/fleetwire"
	"github.com/cove-dev/cove/internal/images"
	"github.com/cove-dev/cove/internal/netpolicy"
	"github.com/cove-dev/cove/internal/node"
	"github.com/cove-dev/cove/internal/node/membership"
	"github.com/cove-dev/cove/internal/node/nodeapi"
	noderuntime "github.com/cove-dev/cove/internal/node/runtime"
	"github.com/cove-dev/cove/internal/node/saves"
	tmplstate "github.com/cove-dev/cove/internal/templates"
)

// NodeConfig is the configuration of `cove node`: the node side of
// Config (its Listen is the node API's address) and how it joins a
// control plane.
type NodeConfig struct {
	Config
	// Controls are the control plane's node listeners, https://HOST:PORT;
	// calls fail over between them.
	Controls []string
	// JoinTokenFile holds the join token, read at the first join only
	// (never a command-line argument: every host user can read those).
	JoinTokenFile string
	// Name is the node's name in the fleet; "" is the host name.
	Name string
	// Advertise is the node API's address the control plane dials; ""
	// is the address Listen bound (which must then not be unspecified).
	Advertise string
	// CPUs and MemoryMiB are the capacity the node offers; 0 is the
	// host's.
	CPUs      float64
	MemoryMiB int64
	// Version is reported to the control plane.
	Version string
}

// Validate reports a node configuration that cannot work.
func (c *NodeConfig) Validate() error {
	switch {
	case len(c.Controls) == 0:
		return errors.New("--control: name the control plane's node listener, https://HOST:PORT")
	case c.JoinTokenFile == "":
		return errors.New("--join-token-file: name the file holding the join token (`cove control` wrote it to <its data dir>/join-token)")
	case c.CPUs < 0 || c.MemoryMiB < 0:
		return fmt.Errorf("--cpus %v and --memory-mib %d: want neither below 0", c.CPUs, c.MemoryMiB)
	}
	for _, u := range c.Controls {
		if !strings.HasPrefix(u, "https://") {
			return fmt.Errorf("--control %q: want https://HOST:PORT (nodes speak TLS only)", u)
		}
	}
	return nil
}

// RunNode runs the node side alone until ctx is done: it joins the
// control plane first (a refused join leaves nothing behind: no nftables
// table, no cgroup), destroys the containers the control plane no longer
// assigns to it, then serves the node API to the control plane only. A
// stop leaves its sandboxes running; the next start reattaches.
func RunNode(ctx context.Context, cfg NodeConfig, log *slog.Logger, progress io.Writer, ready func(Started)) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if cfg.Name == "" {
		host, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("--name: the host name: %w", err)
		}
		cfg.Name = host
	}
	if err := prepareDirs(&cfg.Config, true); err != nil {
		return err
	}
	templates, building, err := loadTemplates(ctx, cfg.Config, log, false)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("node API: %w", err)
	}
	defer ln.Close()
	addr := cfg.Advertise
	if addr == "" {
		addr = ln.Addr().String()
		if ap, err := netip.ParseAddrPort(addr); err == nil && ap.Addr().IsUnspecified() {
			return fmt.Errorf("--listen %s binds every address: say which the control plane dials with --advertise", cfg.Listen)
		}
	}
	saveStore, err := openSaves(ctx, cfg.Config)
	if err != nil {
		return err
	}
	defer saveStore.Close()
	warnUnsharedSaves(cfg.Config, log)

	fetch, err := imageFetcher(cfg.Config, saveStore, log)
	if err != nil {
		return err
	}

	var ns atomic.Pointer[nodeSide]
	tmplNames := func() []string {
		if n := ns.Load(); n != nil {
			return n.templateNames()
		}
		return slices.Sorted(maps.Keys(templates))
	}
	member := membership.New(membership.Config{
		Controls: cfg.Controls, TokenFile: cfg.JoinTokenFile, Name: cfg.Name, Addr: addr,
		Dir: filepath.Join(cfg.DataDir, "fleet"), Version: cfg.Version, Log: log.With("component", "membership"),
		Report: func(ctx context.Context) (fleetwire.Heartbeat, error) {
			hb := fleetwire.Heartbeat{Capacity: capacity(cfg), Templates: tmplNames()}
			if n := ns.Load(); n != nil {
				hb.Capacity.GPUs = n.node.GPUs()
				known, err := n.node.Known(ctx)
				if err != nil {
					return hb, err
				}
				hb.Sandboxes = known
			} else {
				hb.Sandboxes = stateDirs(cfg.DataDir)
			}
			return hb, nil
		},
	})
	adm, err := member.Join(ctx)
	if err != nil {
		return fmt.Errorf("join the control plane: %w", err)
	}
	log.Info("joined the control plane", "node", adm.NodeID, "epoch", adm.Epoch, "assigned", len(adm.Assigned))

	var napi atomic.Pointer[nodeapi.Server]
	listeners := Listeners{"node": addr}
	side, err := startNodeSide(ctx, cfg.Config, templates, saveStore, nodeHooks{
		onExit: func(sb, cmd string, e node.Exit, lost bool) {
			if s := napi.Load(); s != nil {
				s.OnExit(sb, cmd, e, lost)
			}
		},
		denied: func(sb string, o api.NetworkObservation, n int64) {
			if s := napi.Load(); s != nil {
				s.Denied(sb, o, n)
			}
		},
		injected: func(sb string, e netpolicy.InjectEvent) {
			if s := napi.Load(); s != nil {
				s.Injected(sb, e)
			}
		},
		counters:   nopCounters{},
		generation: func() string { return saves.Generation(uint64(member.Epoch()), time.Now()) },
		fetchImage: fetch,
	}, listeners, log)
	if err != nil {
		return err
	}
	defer side.close()
	ns.Store(side)
	server := nodeapi.New(side.node, log.With("component", "nodeapi"))
	napi.Store(server)
	defer server.Close()
	// Before the node API serves: what the control plane gave away while
	// this node was gone must not run twice.
	if err := reconcile(ctx, side, adm.Assigned, log); err != nil {
		return err
	}

	if building {
		bctx, stopBuild := context.WithCancel(context.WithoutCancel(ctx))
		var bwg sync.WaitGroup
		defer bwg.Wait()
		defer stopBuild()
		bwg.Go(func() { buildManaged(bctx, cfg.Config, tmplstate.New(), progress, log, side.addTemplate) })
	}

	// The node API's own server: it pings a silent control plane, so a
	// stream to one that went away ends.
	hs := server.HTTPServer()
	hs.IdleTimeout, hs.MaxHeaderBytes = cfg.HTTP.IdleTimeout, cfg.HTTP.MaxHeaderBytes
	hs.BaseContext = func(net.Listener) context.Context { return context.WithoutCancel(ctx) }
	hs.TLSConfig = member.ServerTLS()
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(tls.NewListener(ln, hs.TLSConfig)) }()

	// Membership: heartbeats, renewals, registering again after a loss.
	mctx, stopMember := context.WithCancel(ctx)
	defer stopMember()
	memberErr := make(chan error, 1)
	var mwg sync.WaitGroup
	defer mwg.Wait()
	mwg.Go(func() {
		memberErr <- member.Run(mctx, func(ctx context.Context, adm fleetwire.Admission) error {
			log.Info("registered again", "node", adm.NodeID, "epoch", adm.Epoch, "assigned", len(adm.Assigned))
			return reconcile(ctx, side, adm.Assigned, log)
		})
	})

	log.Info("serving the node API", "addr", ln.Addr().String(), "advertised", addr, "data_dir", cfg.DataDir)
	if err := writeReady(cfg.ReadyFile, Ready{PID: os.Getpid(), Listeners: listeners}); err != nil {
		hs.Close()
		<-errc
		return fmt.Errorf("write the ready file: %w", err)
	}
	if ready != nil {
		ready(Started{Listeners: listeners})
	}
	var runErr error
	select {
	case err := <-errc:
		runErr = err
	case err := <-memberErr:
		if err != nil && ctx.Err() == nil {
			runErr = fmt.Errorf("membership: %w", err)
		}
	case <-ctx.Done():
	}
	log.Info("shutting down; sandboxes keep running")
	removeReady(cfg.ReadyFile)
	stopMember()
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	server.Close() // ends the long streams so Shutdown need not wait for them
	if err := hs.Shutdown(sctx); err != nil {
		hs.Close()
	}
	return runErr
}

// imageFetcher brings the imported images the control plane published
// to the shared store into the node's images dir, each checked by
// digest, when a sandbox of one is started or woken here.
func imageFetcher(cfg Config, blobs saves.Blobs, log *slog.Logger) (func(ctx context.Context, template string) error, error) {
	if err := os.MkdirAll(cfg.ImagesDir, 0o711); err != nil {
		return nil, fmt.Errorf("create %s: %w", cfg.ImagesDir, err)
	}
	im, err := images.NewImporter(cfg.ImagesDir, images.Policy{MaxBytes: 4 * cfg.ImageMaxMiB << 20}, cfg.ImageMaxMiB<<20, log.With("component", "images"))
	if err != nil {
		return nil, err
	}
	im.SetBlobs(blobs)
	return func(ctx context.Context, template string) error {
		_, err := im.Fetch(ctx, strings.Replace(template, "-", ":", 1))
		if err != nil && api.ErrorCode(err) != api.CodeNotFound {
			return api.Errorf(api.CodePreconditionFailed, "template %s: its image could not be brought from the shared store: %v", template, err)
		}
		return err
	}, nil
}

// reconcile destroys the runtime (containers, not saves or output) of
// every sandbox the node holds that the control plane does not assign to
// it in its current epoch.
func reconcile(ctx context.Context, n *nodeSide, assigned []string, log *slog.Logger) error {
	known, err := n.node.Known(ctx)
	if err != nil {
		return fmt.Errorf("list the node's sandboxes: %w", err)
	}
	for _, id := range known {
		if slices.Contains(assigned, id) {
			continue
		}
		log.Info("destroying a sandbox the control plane no longer assigns to this node", "sandbox", id)
		if err := n.node.DestroyRuntime(ctx, id); err != nil {
			return fmt.Errorf("destroy unassigned sandbox %s: %w", id, err)
		}
	}
	return nil
}

// stateDirs lists the sandboxes the node has state for, without starting
// anything (before the join).
func stateDirs(dataDir string) []string {
	entries, _ := os.ReadDir(filepath.Join(dataDir, "sandboxes"))
	var ids []string
	for _, e := range entries {
		if e.IsDir() && noderuntime.ValidID(e.Name()) {
			ids = append(ids, e.Name())
		}
	}
	return ids
}

// capacity is what the node offers: the configured figures, or the host's.
func capacity(cfg NodeConfig) fleetwire.Capacity {
	c := fleetwire.Capacity{CPUs: cfg.CPUs, MemoryMiB: cfg.MemoryMiB}
	if c.CPUs == 0 {
		c.CPUs = float64(runtime.NumCPU())
	}
	if c.MemoryMiB == 0 {
		var si syscall.Sysinfo_t
		if syscall.Sysinfo(&si) == nil {
			c.MemoryMiB = int64(si.Totalram) * int64(si.Unit) >> 20
		}
	}
	var st syscall.Statfs_t
	if syscall.Statfs(cfg.DataDir, &st) == nil {
		c.DiskMiB = int64(st.Bavail) * st.Bsize >> 20
	}
	return c
}

// nopCounters: a node keeps no gateway metrics of its own yet.
type nopCounters struct{}

func (nopCounters) GatewayDecision(string)    {}
func (nopCounters) GatewayBytes(int64, int64) {}
