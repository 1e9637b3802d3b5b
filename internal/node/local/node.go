// Package local is the host side of sandboxes: it starts and destroys them
// through the runtime, talks to each one's agent, and records every
// command's output on the node so that it outlives clients, agents and
// restarts of the server.
package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/agent/client"
	"github.com/cove-dev/cove/internal/agent/wire"
	"github.com/cove-dev/cove/internal/fsspread"
	"github.com/cove-dev/cove/internal/netpolicy"
	"github.com/cove-dev/cove/internal/node"
	"github.com/cove-dev/cove/internal/node/image"
	"github.com/cove-dev/cove/internal/node/output"
	"github.com/cove-dev/cove/internal/node/runtime"
	"github.com/cove-dev/cove/internal/node/saves"
	"github.com/cove-dev/cove/internal/node/watch"
)

// Runtime starts, finds and removes sandbox containers.
type Runtime interface {
	Start(ctx context.Context, spec runtime.Spec) (*client.Client, error)
	Attach(ctx context.Context, id string) (*client.Client, error)
	Destroy(ctx context.Context, id string) error
	List(ctx context.Context) ([]string, error)
	Stop(ctx context.Context, id string) (disk string, err error)
	StateDir(id string) string
	SetHostname(ctx context.Context, id, name string) error
	State(ctx context.Context, id string) (runtime.State, error)
	// Freeze, LayerTemp, AddLayer, HasLayer and RemoveLayer keep the
	// frozen disks of snapshots (runtime/layers_linux.go).
	Freeze(ctx context.Context, id, dst string) (int64, error)
	LayerTemp(name string) (string, error)
	AddLayer(ctx context.Context, name, img string) error
	HasLayer(name string) bool
	RemoveLayer(ctx context.Context, name string) error
	UnmountLayers() error
	// CreateVolume, DropVolume and VolumeUsage keep the team volumes of
	// the node (runtime/volume_linux.go).
	CreateVolume(ctx context.Context, id string, sizeMiB int64) error
	DropVolume(ctx context.Context, id string) error
	VolumeUsage(ctx context.Context, id string) (runtime.VolumeUsage, error)
	VolumeImages() []string
	HasVolume(id string) bool
	UnmountVolumes() error
}

// Network connects sandboxes to the node's fence, resolver and gateway.
type Network interface {
	// Prepare gives a sandbox its link before it starts and returns the
	// resolv.conf the sandbox should see.
	Prepare(id string) (resolvConf string, err error)
	// Lay fences a prepared sandbox's link while the sandbox starts;
	// Connect makes it, Disconnect removes it.
	Lay(ctx context.Context, id string) error
	// Connect fences and connects a started sandbox (its init is pid)
	// under its policy, with the secrets its injection rules name and its
	// gateway CA (nil: none).
	Connect(ctx context.Context, id string, pid int, p api.NetworkPolicy, inject []node.InjectSecret, ca *netpolicy.SandboxCA) error
	// Reconnect registers a sandbox found running after a restart.
	Reconnect(id string, p api.NetworkPolicy, inject []node.InjectSecret, ca *netpolicy.SandboxCA) error
	// SetPolicy changes a sandbox's policy for new connections.
	SetPolicy(id string, p api.NetworkPolicy) error
	// SetInjectSecrets replaces the secrets the gateway injects for a
	// sandbox; CA and SetCA are its gateway CA and give it one.
	SetInjectSecrets(id string, inject []node.InjectSecret)
	CA(id string) *netpolicy.SandboxCA
	SetCA(id string, ca *netpolicy.SandboxCA)
	// UseSetup switches a sandbox to its setup policy or back.
	UseSetup(id string, on bool)
	// Disconnect removes the sandbox's link, rules and gateway state.
	Disconnect(ctx context.Context, id string) error
	// DrainObservations hands over every sandbox's network reports since
	// the last call; PendingObservations are a sandbox's not handed over
	// yet.
	DrainObservations() []node.Observation
	PendingObservations(id string) []api.NetworkObservation
	// Publish sets the ports of a sandbox the node may connect to; they
	// hold across sleeps until set again (none: forgotten).
	Publish(ctx context.Context, id string, ports []uint16) error
	// PublishPort and UnpublishPort add or take away one port, at a cost
	// that does not grow with the ports the sandbox publishes.
	PublishPort(ctx context.Context, id string, port uint16) error
	UnpublishPort(ctx context.Context, id string, port uint16) error
	// Addr is a connected sandbox's address.
	Addr(id string) (netip.Addr, bool)
}

// Config is the node's configuration.
type Config struct {
	// Templates are the images sandboxes start from, by template name.
	Templates map[string]image.Image
	// ImagesDir holds imported images too, which are templates named
	// by their digest ("sha256-…", image.DirName), loaded when first used.
	ImagesDir string
	// DataDir is the node's data dir, named when a write finds its disk
	// full.
	DataDir string
	// OutputDir holds recorded output, one directory per sandbox.
	OutputDir string
	// OutputMaxBytes caps the recorded output of one command, its index
	// included.
	OutputMaxBytes int64
	// DiskOvercommit admits sandboxes while the disks they may still grow
	// into fit in this many times the data disk's free space (less
	// DiskReserveBytes); 0 admits all.
	DiskOvercommit float64
	// DiskReserveBytes of the data disk are kept for recorded output, the
	// database and saves.
	DiskReserveBytes int64
	// SandboxOutputMaxBytes caps the recorded output of all the commands
	// of one sandbox together; 0 sets no cap beyond OutputMaxBytes.
	SandboxOutputMaxBytes int64
	// Saves keeps the files of sleeping sandboxes, and their recorded
	// output with them.
	Saves saves.Store
	// Generation names each new save (saves.Generation); nil names them
	// "0-<unix nanos>", as a node outside a fleet (epoch 0) does.
	Generation func() string
	// Network fences sandboxes; nil leaves them with loopback only.
	Network Network
	// GitDir holds git clones while they are made, each on a scratch
	// filesystem of MaxCloneBytes (admitted like a sandbox's disk while
	// the clone runs); a clone whose tree is larger fails.
	GitDir        string
	MaxCloneBytes int64
	// CABundles are, by template, host files that replace the image's
	// system CA bundle (the image's certificates plus the operator's);
	// commands in those sandboxes get the CA variables of caEnv.
	CABundles map[string]string
	// SandboxCADir holds the CA bundles of sandboxes with injection rules
	// (network.inject): their template's bundle plus their gateway CA's
	// certificate. Empty: none are written.
	SandboxCADir string
	// GPUs are the node's GPUs (internal/node/gpu); nil when it has none.
	GPUs GPUInventory
	// FetchImage, when set, brings an imported image (a "sha256-…"
	// template) that ImagesDir lacks into it before a Start or Wake of
	// it (a fleet's node, from the shared store); nil fetches nothing.
	FetchImage func(ctx context.Context, template string) error
}

// GPUInventory is what the node advertises of its GPUs; the runtime
// injects the devices (runtime.Config.Devices).
type GPUInventory interface {
	Kind() string
	Names() []string
}

// GPUs advertises the node's GPUs: their type and CDI names.
func (n *Node) GPUs() node.GPUs {
	if n.cfg.GPUs == nil {
		return node.GPUs{}
	}
	return node.GPUs{Type: n.cfg.GPUs.Kind(), Names: n.cfg.GPUs.Names()}
}

// caEnv points the tools that keep CA lists of their own (Node.js, pip's
// and requests' certifi) or read a variable first (OpenSSL, git) at the
// system bundle, which holds the operator's CA certificates too. A
// variable the sandbox or the command sets wins.
var caEnv = []string{"SSL_CERT_FILE", "NODE_EXTRA_CA_CERTS", "REQUESTS_CA_BUNDLE", "PIP_CERT", "GIT_SSL_CAINFO"}

// Node runs sandboxes on this host.
type Node struct {
	cfg    Config
	rt     Runtime
	log    *slog.Logger
	onExit node.ExitFunc
	// ctx is the node's lifecycle: output recorders run until Close cancels
	// it, independent of any request that started a command.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// capMu serializes disk admission; pending are the disks admitted and
	// being made, by sandbox.
	capMu   sync.Mutex
	pending map[string]int64

	// tmplMu guards cfg.Templates and cfg.CABundles, which grow when a
	// template's build ends after the node started (AddTemplate).
	tmplMu sync.RWMutex

	mu        sync.Mutex
	sandboxes map[string]*sandbox
	logs      map[string]*logEntry      // by sandbox/command, open while held
	budgets   map[string]*output.Budget // output budgets by sandbox
	// spares are the empty files new logs take, kept from the logs of
	// sandboxes that are gone (output.Spares); nil without an OutputDir.
	spares *output.Spares

	// watches are the journals of file watches (watch.go).
	watches *watch.Journals
}

type sandbox struct {
	id     string
	client *client.Client
	// secrets are the values its commands' output is redacted of.
	secrets *secretSet
	// recorders cancels the sandbox's recorders when it is destroyed.
	ctx    context.Context
	cancel context.CancelFunc
}

// New returns a node; it starts nothing until sandboxes are started.
func New(cfg Config, rt Runtime, log *slog.Logger, onExit node.ExitFunc) *Node {
	ctx, cancel := context.WithCancel(context.Background())
	n := &Node{
		cfg: cfg, rt: rt, log: log, onExit: onExit,
		ctx: ctx, cancel: cancel,
		sandboxes: map[string]*sandbox{},
		logs:      map[string]*logEntry{},
		budgets:   map[string]*output.Budget{},
		pending:   map[string]int64{},
	}
	n.watches = watch.New(watch.Config{}, n.openWatch, log)
	n.removeLeftClones()
	if cfg.OutputDir != "" {
		sp, err := output.OpenSpares(filepath.Join(cfg.OutputDir, spareDir), maxSpares)
		if err != nil {
			log.Warn("new commands' logs are created, not taken from spares", "err", err)
		}
		n.spares = sp
		// Each sandbox's output directory goes where few directories are.
		if err := fsspread.Subdirs(cfg.OutputDir); err != nil {
			log.Debug("sandboxes' output directories are placed by the filesystem", "err", err)
		}
	}
	return n
}

// spareDir, in OutputDir, holds the spare files of output.Spares; no
// sandbox ID starts with a dot.
const spareDir = ".spare"

// maxSpares bounds the spare files kept: empty files, an inode and a
// name each.
const maxSpares = 1 << 16

// Close stops recording (commands keep running in their sandboxes) and
// waits for the node's goroutines.
func (n *Node) Close() error {
	n.watches.Close()
	n.cancel()
	n.wg.Wait()
	n.mu.Lock()
	defer n.mu.Unlock()
	var errs []error
	for key, e := range n.logs {
		errs = append(errs, e.log.Close())
		delete(n.logs, key)
	}
	for _, s := range n.sandboxes {
		s.client.Close()
	}
	if n.rt != nil {
		errs = append(errs, n.rt.UnmountLayers(), n.rt.UnmountVolumes())
	}
	return errors.Join(errs...)
}

// Start starts a sandbox under its network policy and waits until its
// agent answers. The sandbox is fenced before it can send anything: it has
// no interface but loopback until Connect has put its rules in place.
func (n *Node) Start(ctx context.Context, spec node.SandboxSpec) error {
	if err := n.fetchTemplate(ctx, spec.Template); err != nil {
		return err
	}
	rs, err := n.runtimeSpec(spec)
	if err != nil {
		return err
	}
	if err := n.fetchLayers(ctx, spec.Layers); err != nil {
		return err
	}
	release, err := n.reserve(spec.ID, rs.DiskMiB<<20)
	if err != nil {
		return err
	}
	defer release()
	return n.start(ctx, rs, spec.Template, spec.Network, spec.Secrets, spec.Inject)
}

// runtimeSpec is what the runtime needs to start a sandbox.
func (n *Node) runtimeSpec(spec node.SandboxSpec) (runtime.Spec, error) {
	img, ok := n.template(spec.Template)
	if !ok {
		return runtime.Spec{}, api.Errorf(api.CodeInvalidArgument, "template %q has no image on this node", spec.Template)
	}
	return runtime.Spec{
		ID: spec.ID, Hostname: spec.Hostname, Image: img,
		CPUs: spec.Resources.CPUs, MemoryMiB: spec.Resources.MemoryMiB, DiskMiB: spec.Resources.DiskMiB,
		Pids: spec.Pids, Workdir: spec.Workdir, CABundle: n.caBundle(spec.Template),
		IDs:     image.IDMap{HostID: spec.IDs.HostID, Size: spec.IDs.Size},
		DiskIDs: image.IDMap{HostID: spec.DiskIDs.HostID, Size: spec.DiskIDs.Size},
		Devices: spec.Devices, SetID: spec.SetID, Layers: runtimeLayers(spec.Layers),
		Volumes: runtimeVolumes(spec.Volumes),
	}, nil
}

func runtimeVolumes(vs []node.VolumeMount) []runtime.VolumeMount {
	var out []runtime.VolumeMount
	for _, v := range vs {
		out = append(out, runtime.VolumeMount{ID: v.ID, Path: v.Path, ReadOnly: v.ReadOnly})
	}
	return out
}

func runtimeLayers(ls []node.Layer) []runtime.Layer {
	var out []runtime.Layer
	for _, l := range ls {
		out = append(out, runtime.Layer{Name: l.Snapshot, IDs: image.IDMap{HostID: l.IDs.HostID, Size: l.IDs.Size}})
	}
	return out
}

func (n *Node) start(ctx context.Context, spec runtime.Spec, template string, p api.NetworkPolicy, given []node.Secret, inject []node.InjectSecret) (err error) {
	if n.cfg.Network != nil {
		if spec.ResolvConf, err = n.cfg.Network.Prepare(spec.ID); err != nil {
			return err
		}
	}
	n.removeBundle(spec.ID)
	ca, bundle, err := n.injectCA(spec.ID, template, p)
	if err != nil {
		return err
	}
	if bundle != "" {
		spec.CABundle = bundle
	}
	// The host's part of the link is made while the sandbox starts.
	laid := make(chan error, 1)
	if n.cfg.Network != nil {
		go func() { laid <- n.cfg.Network.Lay(ctx, spec.ID) }()
	} else {
		laid <- nil
	}
	c, err := n.rt.Start(ctx, spec)
	if lerr := <-laid; err == nil && lerr != nil {
		c.Close()
		err = lerr
		if derr := n.rt.Destroy(context.WithoutCancel(ctx), spec.ID); derr != nil {
			err = errors.Join(err, derr)
		}
	}
	if err != nil {
		n.disconnect(ctx, spec.ID)
		return err
	}
	if n.cfg.Network != nil {
		st, err := n.rt.State(ctx, spec.ID)
		if err == nil {
			err = n.cfg.Network.Connect(ctx, spec.ID, st.PID, p, inject, ca)
		}
		if err != nil {
			c.Close()
			cctx := context.WithoutCancel(ctx)
			n.disconnect(cctx, spec.ID)
			if derr := n.rt.Destroy(cctx, spec.ID); derr != nil {
				err = errors.Join(err, derr)
			}
			return fmt.Errorf("connect sandbox %s: %w", spec.ID, err)
		}
	}
	// The output directory is made now, not by the first command: on a
	// filesystem where making a directory is slow (see output.Spares), a
	// sandbox from the warm pool then starts its first command as fast as
	// its next ones. The first command makes it if this could not.
	if err := os.MkdirAll(n.outputDir(spec.ID), 0o700); err != nil {
		n.log.Warn("make the output directory", "sandbox", spec.ID, "err", err)
	}
	n.add(spec.ID, c).secrets.add(given)
	return nil
}

func (n *Node) disconnect(ctx context.Context, id string) {
	if n.cfg.Network == nil {
		return
	}
	if err := n.cfg.Network.Disconnect(context.WithoutCancel(ctx), id); err != nil {
		n.log.Error("disconnect sandbox", "sandbox", id, "err", err)
	}
}

// SetPolicy changes a running sandbox's network policy for new
// connections. A sandbox given its first injection rules gets its gateway
// CA now: its certificate is written into the sandbox's own bundle in
// place, which the running sandbox has mounted.
func (n *Node) SetPolicy(id string, p api.NetworkPolicy) error {
	if n.cfg.Network == nil {
		return nil
	}
	if len(p.Inject) > 0 && n.cfg.Network.CA(id) == nil {
		if err := n.addCA(id); err != nil {
			return err
		}
	}
	return n.cfg.Network.SetPolicy(id, p)
}

// SetInjectSecrets replaces the secrets the gateway injects for a running
// sandbox (a rule or a team secret changed since it started).
func (n *Node) SetInjectSecrets(id string, inject []node.InjectSecret) error {
	if n.cfg.Network != nil {
		n.cfg.Network.SetInjectSecrets(id, inject)
	}
	return nil
}

// UseSetupPolicy switches a sandbox to its setup policy (on) or back to
// its own, for new connections and lookups.
func (n *Node) UseSetupPolicy(id string, on bool) {
	if n.cfg.Network != nil {
		n.cfg.Network.UseSetup(id, on)
	}
}

// DrainObservations hands over every sandbox's network reports since the
// last call.
func (n *Node) DrainObservations() []node.Observation {
	if n.cfg.Network == nil {
		return nil
	}
	return n.cfg.Network.DrainObservations()
}

// PendingObservations are a sandbox's network reports not handed over yet.
func (n *Node) PendingObservations(id string) []api.NetworkObservation {
	if n.cfg.Network == nil {
		return nil
	}
	return n.cfg.Network.PendingObservations(id)
}

// SocketOwners asks a running sandbox's agent which commands hold the
// given sockets (see client.SocketOwners).
func (n *Node) SocketOwners(ctx context.Context, id string, socks []wire.Socket) ([]string, error) {
	s, err := n.get(id)
	if err != nil {
		return nil, err
	}
	return s.client.SocketOwners(ctx, socks)
}

func (n *Node) add(id string, c *client.Client) *sandbox {
	ctx, cancel := context.WithCancel(n.ctx)
	s := &sandbox{id: id, client: c, secrets: &secretSet{}, ctx: ctx, cancel: cancel}
	n.mu.Lock()
	n.sandboxes[id] = s
	n.mu.Unlock()
	return s
}

// attachTimeout bounds what Attach asks the agent (the runtime bounds its
// own wait for the agent's first answer).
const attachTimeout = 10 * time.Second

// Attach finds a sandbox that was running before the server restarted and
// resumes recording the given commands. Commands whose exit was recorded or
// that the agent no longer knows are reported to the ExitFunc.
func (n *Node) Attach(ctx context.Context, spec node.SandboxSpec, running []string) error {
	id, p := spec.ID, spec.Network
	if _, err := n.get(id); err == nil {
		// Attached already (a control plane that started again asks a
		// node that did not): it records its commands.
		return nil
	}
	c, err := n.rt.Attach(ctx, id)
	if err != nil {
		return err
	}
	if n.cfg.Network != nil {
		// The gateway CA's key went with the process: a new CA, whose
		// certificate replaces the old one in the sandbox's bundle.
		var ca *netpolicy.SandboxCA
		if n.hasBundle(id) {
			if ca, _, err = n.injectCA(id, spec.Template, p); err != nil {
				c.Close()
				return err
			}
		}
		if err := n.cfg.Network.Reconnect(id, p, spec.Inject, ca); err != nil {
			c.Close()
			return fmt.Errorf("reconnect %s: %w", id, err)
		}
	}
	// Attach runs while the server starts: an agent that does not answer
	// must not hold it (or the other sandboxes) up.
	lctx, cancel := context.WithTimeout(ctx, attachTimeout)
	known, err := c.Commands(lctx)
	cancel()
	if err != nil {
		c.Close()
		return fmt.Errorf("list commands of %s: %w", id, err)
	}
	s := n.add(id, c)
	s.secrets.add(spec.Secrets)
	alive := map[string]bool{}
	for _, st := range known {
		alive[st.ID] = true
	}
	for _, cmd := range running {
		l, err := n.acquire(id, cmd, true)
		if err != nil {
			return err
		}
		switch {
		case l.Exit() != nil:
			n.onExit(id, cmd, *l.Exit(), l.Exit().Lost)
			l.Close()
		case alive[cmd]:
			n.record(s, cmd, l, isPTY(filepath.Join(n.outputDir(id), cmd)), nil, nil)
		default:
			n.lose(id, cmd, l.Log)
			l.Close()
		}
	}
	return nil
}

// Lose records every given command of a sandbox as lost (its sandbox is
// gone) and reports each to the ExitFunc.
func (n *Node) Lose(id string, commands []string) {
	for _, cmd := range commands {
		l, err := n.acquire(id, cmd, true)
		if err != nil {
			n.log.Warn("open output to mark command lost", "sandbox", id, "command", cmd, "err", err)
			n.onExit(id, cmd, node.Exit{ExitCode: -1}, true)
			continue
		}
		n.lose(id, cmd, l.Log)
		l.Close()
	}
}

func (n *Node) lose(id, cmd string, l *output.Log) {
	if e := l.Exit(); e != nil {
		n.onExit(id, cmd, *e, e.Lost)
		return
	}
	if err := l.End(node.Exit{ExitCode: -1, Lost: true}); err != nil {
		n.log.Warn("record lost command", "sandbox", id, "command", cmd, "err", err)
	}
	n.onExit(id, cmd, node.Exit{ExitCode: -1, Lost: true}, true)
}

// Destroy stops everything of a sandbox and deletes its files and recorded
// output. It is idempotent.
func (n *Node) Destroy(ctx context.Context, id string) error {
	n.watches.Forget(id)
	n.detach(id)
	n.disconnect(ctx, id)
	n.unpublish(ctx, id)
	err := n.rt.Destroy(ctx, id)
	n.removeBundle(id)
	n.closeLogs(id)
	if rmErr := n.spares.Recycle(n.outputDir(id)); rmErr != nil {
		err = errors.Join(err, fmt.Errorf("remove output of %s: %w", id, rmErr))
	}
	if serr := n.cfg.Saves.Delete(ctx, id); serr != nil {
		err = errors.Join(err, serr)
	}
	os.Remove(n.restorePath(id))
	n.spares.Recycle(n.outputDir(id) + ".replaced")
	return err
}

// detach forgets a sandbox's agent and stops recording its commands.
func (n *Node) detach(id string) {
	n.mu.Lock()
	s := n.sandboxes[id]
	delete(n.sandboxes, id)
	n.mu.Unlock()
	if s != nil {
		s.cancel()
		s.client.Close()
	}
}

// FinishSleep completes a sleep that a crash interrupted: whatever state the
// sandbox was left in, it ends saved and without a runtime, or with an
// error and its files kept on the node. The save holds the sandbox's
// recorded output too, so that it replays on whichever node wakes it.
func (n *Node) FinishSleep(ctx context.Context, id string) (node.SaveInfo, error) {
	n.detach(id)
	var m saves.Manifest
	var err error
	if _, serr := os.Stat(n.rt.StateDir(id)); errors.Is(serr, os.ErrNotExist) {
		// The runtime was already removed: the save was complete.
		m, err = n.cfg.Saves.Stat(ctx, id, "")
	} else {
		m, err = n.finishSleep(ctx, id)
	}
	return saveInfo(m), err
}

func saveInfo(m saves.Manifest) node.SaveInfo {
	return node.SaveInfo{DataBytes: m.DataBytes, ArchiveBytes: m.ArchiveBytes, Generation: m.Generation}
}

// generation names a new save.
func (n *Node) generation() string {
	if n.cfg.Generation != nil {
		return n.cfg.Generation()
	}
	return saves.Generation(0, time.Now())
}

func (n *Node) finishSleep(ctx context.Context, id string) (saves.Manifest, error) {
	n.disconnect(ctx, id)
	disk, err := n.rt.Stop(ctx, id)
	if errors.Is(err, runtime.ErrNoDisk) {
		// The removal that follows a complete save takes the disk image
		// first: a crash in the middle of it left the rest.
		if err := n.rt.Destroy(ctx, id); err != nil {
			return saves.Manifest{}, err
		}
		return n.cfg.Saves.Stat(ctx, id, "")
	}
	if err != nil {
		return saves.Manifest{}, err
	}
	out := n.outputDir(id)
	m, err := n.cfg.Saves.Save(ctx, id, n.generation(), saves.Files{Disk: disk, Output: out})
	if err != nil {
		return m, err // the disk image stays in the state dir
	}
	// This node's output is the save's: a wake here keeps it.
	n.markOutput(id, m.Generation)
	if err := n.rt.Destroy(ctx, id); err != nil {
		return m, fmt.Errorf("remove runtime after saving %s: %w", id, err)
	}
	return m, nil
}

// markOutput notes in a sandbox's output directory the save generation
// it matches.
func (n *Node) markOutput(id, gen string) {
	dir := n.outputDir(id)
	err := os.MkdirAll(dir, 0o700)
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, saves.OutputMarker), []byte(gen), 0o600)
	}
	if err != nil {
		n.log.Warn("mark output as saved", "sandbox", id, "generation", gen, "err", err)
	}
}

// outputMatches reports whether this node's output of a sandbox is the
// one saved as gen.
func (n *Node) outputMatches(id, gen string) bool {
	b, err := os.ReadFile(filepath.Join(n.outputDir(id), saves.OutputMarker))
	return err == nil && string(b) == gen
}

// Wake restores a sandbox's save (generation spec.Save, or the newest)
// and starts it. The save stays until DropSave, so a crash mid-wake still
// finds it. When this node's recorded output of the sandbox is missing or
// not the save's (it ran elsewhere since), the save's output replaces it.
func (n *Node) Wake(ctx context.Context, ns node.SandboxSpec) error {
	if err := n.fetchTemplate(ctx, ns.Template); err != nil {
		return err
	}
	spec, err := n.runtimeSpec(ns)
	if err != nil {
		return err
	}
	if err := n.fetchLayers(ctx, ns.Layers); err != nil {
		return err
	}
	release, err := n.reserve(spec.ID, spec.DiskMiB<<20)
	if err != nil {
		return err
	}
	defer release()
	// A runtime left by an interrupted wake goes first.
	if err := n.rt.Destroy(ctx, spec.ID); err != nil {
		return err
	}
	m, err := n.cfg.Saves.Stat(ctx, spec.ID, ns.Save)
	if err != nil {
		return err
	}
	tmp := n.restorePath(spec.ID)
	// A node that never ran a sandbox has no state dir yet (the runtime
	// makes it 0711, as here).
	if err := os.MkdirAll(filepath.Dir(tmp), 0o711); err != nil {
		return err
	}
	os.Remove(tmp)
	files := saves.Files{Disk: tmp}
	var aside string
	if m.HasOutput() && !n.outputMatches(spec.ID, m.Generation) {
		if aside, err = n.setOutputAside(spec.ID); err != nil {
			return err
		}
		files.Output = n.outputDir(spec.ID)
	}
	// Exactly the generation found, even if a newer one lands meanwhile.
	gen := ns.Save
	if m.Generation != "" {
		gen = m.Generation
	}
	if _, err := n.cfg.Saves.Restore(ctx, spec.ID, gen, files); err != nil {
		n.putOutputBack(spec.ID, aside)
		return err
	}
	if aside != "" {
		n.spares.Recycle(aside)
	}
	spec.Disk = tmp
	if err := n.start(ctx, spec, ns.Template, ns.Network, ns.Secrets, ns.Inject); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

// setOutputAside moves a sandbox's output directory out of the way of a
// restore, returning where it went ("" when there was none).
func (n *Node) setOutputAside(id string) (string, error) {
	n.closeLogs(id)
	if err := os.MkdirAll(n.cfg.OutputDir, 0o700); err != nil {
		return "", err
	}
	dir := n.outputDir(id)
	aside := dir + ".replaced"
	if err := os.RemoveAll(aside); err != nil {
		return "", err
	}
	if err := os.Rename(dir, aside); errors.Is(err, os.ErrNotExist) {
		return "", nil
	} else if err != nil {
		return "", fmt.Errorf("set output of %s aside: %w", id, err)
	}
	return aside, nil
}

// putOutputBack undoes setOutputAside after a failed restore.
func (n *Node) putOutputBack(id, aside string) {
	if aside == "" {
		return
	}
	if err := os.Rename(aside, n.outputDir(id)); err != nil {
		n.log.Warn("put output back after a failed restore", "sandbox", id, "err", err)
	}
}

// SetHostname renames a running sandbox's host (a warm sandbox handed out).
func (n *Node) SetHostname(ctx context.Context, id, name string) error {
	return n.rt.SetHostname(ctx, id, name)
}

// DropSave removes a sandbox's save once it runs again.
func (n *Node) DropSave(ctx context.Context, id string) error { return n.cfg.Saves.Delete(ctx, id) }

// CopySave copies the newest save named from as a new generation of the
// save named to (its disk only), through a sparse disk image restored
// beside the state dirs.
func (n *Node) CopySave(ctx context.Context, from, to string) (node.SaveInfo, error) {
	scratch := filepath.Dir(n.rt.StateDir(to))
	if err := os.MkdirAll(scratch, 0o711); err != nil {
		return node.SaveInfo{}, err
	}
	m, err := saves.Copy(ctx, n.cfg.Saves, from, "", to, n.generation(), scratch)
	return saveInfo(m), err
}

// DestroyRuntime removes a sandbox's runtime but keeps its save and output.
func (n *Node) DestroyRuntime(ctx context.Context, id string) error {
	n.detach(id)
	n.disconnect(ctx, id)
	os.Remove(n.restorePath(id))
	err := n.rt.Destroy(ctx, id)
	n.removeBundle(id)
	return err
}

// restorePath is where a save is restored before the runtime takes it:
// beside the state dirs, on the same filesystem.
func (n *Node) restorePath(id string) string { return n.rt.StateDir(id) + ".restore.img" }

// Known lists the sandboxes the runtime has state for, running or not.
func (n *Node) Known(ctx context.Context) ([]string, error) { return n.rt.List(ctx) }

func (n *Node) outputDir(sandboxID string) string {
	return filepath.Join(n.cfg.OutputDir, sandboxID)
}

// Output returns the recorded output of a command, held for the caller
// until it closes it. The output of a terminated sandbox is not_found.
func (n *Node) Output(sandboxID, commandID string) (node.Output, error) {
	return n.acquire(sandboxID, commandID, false)
}

func (n *Node) get(id string) (*sandbox, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	s, ok := n.sandboxes[id]
	if !ok {
		return nil, api.Errorf(api.CodeConflict, "sandbox %s is not running", id)
	}
	return s, nil
}

// Exec starts a command and records its output until it ends. Its pid is
// the agent's word, the process's pid in the sandbox's own namespace.
func (n *Node) Exec(ctx context.Context, sandboxID string, spec node.ExecSpec) (_ node.Started, err error) {
	defer func() { err = n.noRoom(err, "the command's output cannot be recorded, so it was not started") }()
	req, err := n.execRequest(spec, n.injecting(sandboxID))
	if err != nil {
		return node.Started{}, err
	}
	s, err := n.get(sandboxID)
	if err != nil {
		return node.Started{}, err
	}
	l, err := n.acquire(sandboxID, req.ID, true)
	if err != nil {
		return node.Started{}, err
	}
	pty := spec.PTY != nil
	if pty {
		if err := markPTY(filepath.Join(n.outputDir(sandboxID), req.ID)); err != nil {
			l.Close()
			return node.Started{}, fmt.Errorf("mark terminal output: %w", err)
		}
	}
	// Before the command runs, so that its first byte is redacted too.
	s.secrets.add(spec.Secrets)
	// One call starts the command and streams its output to the
	// recorder: the stream lives with the sandbox, not the request,
	// which bounds only the start (a request gone while its stream
	// is being opened cancels it; a stream cut so is resumed).
	sctx, cancel := context.WithCancel(s.ctx)
	stop := context.AfterFunc(ctx, cancel)
	st, stream, err := s.client.ExecOutput(sctx, req)
	stop()
	if err != nil {
		cancel()
		l.Close()
		return node.Started{}, err
	}
	n.record(s, req.ID, l, pty, stream, cancel)
	pid, ok := agentPID(st.PID)
	if !ok {
		n.log.Warn("the agent answered a pid out of range", "sandbox", sandboxID, "command", req.ID, "pid", st.PID)
	}
	return node.Started{PID: pid}, nil
}

// agentPID is the pid the sandbox's agent answered for a command, when
// it is one Linux could give. The agent is the sandbox's: a pid it could
// not have is not believed, and the command runs with its pid unknown
// (0). A pid is only recorded and shown, never signalled by the host.
func agentPID(pid int) (int, bool) {
	if pid <= 0 || pid > node.MaxPID {
		return 0, false
	}
	return pid, true
}

// execRequest is the agent's request for a command: a shell string runs
// under the template's shell; the environment becomes a list.
func (n *Node) execRequest(spec node.ExecSpec, ownBundle bool) (wire.ExecRequest, error) {
	argv := spec.Argv
	if spec.Shell != "" {
		img, ok := n.template(spec.Template)
		if !ok {
			return wire.ExecRequest{}, api.Errorf(api.CodeInvalidArgument, "template %q has no image on this node", spec.Template)
		}
		if len(img.Shell) == 0 {
			return wire.ExecRequest{}, api.Errorf(api.CodeInvalidArgument, "the image of this sandbox has no shell; run the program with argv instead of command")
		}
		argv = append(slices.Clone(img.Shell), spec.Shell)
	}
	env := make([]string, 0, len(spec.Env)+len(caEnv))
	for k, v := range spec.Env {
		env = append(env, k+"="+v)
	}
	if n.caBundle(spec.Template) != "" || ownBundle {
		for _, k := range caEnv {
			if _, set := spec.Env[k]; !set {
				env = append(env, k+"="+runtime.CABundlePath)
			}
		}
	}
	sort.Strings(env)
	req := wire.ExecRequest{
		ID: spec.ID, Argv: argv, Cwd: spec.Cwd, Env: env, UID: spec.UID, GID: spec.GID,
		Stdin: spec.Stdin, TimeoutMS: spec.Timeout.Milliseconds(),
	}
	if spec.PTY != nil {
		req.PTY = &wire.Size{Cols: spec.PTY.Cols, Rows: spec.PTY.Rows}
	}
	return req, nil
}

// record copies the command's output from the agent into its log until the
// exit frame, resuming after the last recorded frame whenever the stream
// breaks. It runs until the command ends or the sandbox or node goes away.
// first, when not nil, is the stream the command's start opened (its
// context's cancel is stop); it is read before any other is asked for.
func (n *Node) record(s *sandbox, cmd string, ref *logRef, pty bool, first *client.OutputStream, stop context.CancelFunc) {
	n.wg.Go(func() {
		if stop != nil {
			defer stop()
		}
		defer ref.Close() // the recorder's hold, taken when the command started
		l := ref.Log
		w := newRedacting(l, s.secrets, pty)
		if pty {
			fctx, stop := context.WithCancel(s.ctx)
			var fwg sync.WaitGroup
			fwg.Go(func() { w.flushTerminal(fctx) })
			defer fwg.Wait()
			defer stop()
		}
		log := n.log.With("sandbox", s.id, "command", cmd)
		backoff := 10 * time.Millisecond
		for {
			done, err := n.copyOutput(s, cmd, w, first)
			first = nil
			if done {
				return
			}
			if s.ctx.Err() != nil {
				return
			}
			log.Debug("output stream broke; resuming", "err", err)
			select {
			case <-time.After(backoff):
			case <-s.ctx.Done():
				return
			}
			backoff = min(2*backoff, time.Second)
		}
	})
}

// copyOutput reads one stream of frames into l: stream when not nil, else
// one it asks for. It reports done once the exit is recorded and reported.
func (n *Node) copyOutput(s *sandbox, cmd string, w *redacting, stream *client.OutputStream) (bool, error) {
	l := w.l
	if stream == nil {
		var err error
		stream, err = s.client.Output(s.ctx, cmd, w.resumeAfter())
		if err != nil {
			if api.ErrorCode(err) == api.CodeNotFound {
				n.lose(s.id, cmd, l)
				return true, nil
			}
			return false, err
		}
	}
	defer stream.Close()
	for {
		f, err := stream.Next()
		if errors.Is(err, io.EOF) && l.Exit() != nil {
			// The exit was recorded before a restart; only the report and
			// the forget may be missing.
			n.finish(s, cmd, l)
			return true, nil
		}
		if err != nil {
			return false, err
		}
		if err := w.frame(f); err != nil {
			return false, err
		}
		if f.Kind == wire.FrameExit {
			n.finish(s, cmd, l)
			return true, nil
		}
	}
}

// finish reports a recorded exit and lets the agent forget the command.
func (n *Node) finish(s *sandbox, cmd string, l *output.Log) {
	if e := l.Exit(); e != nil {
		n.onExit(s.id, cmd, *e, e.Lost)
	}
	ctx, cancel := context.WithTimeout(s.ctx, 5*time.Second)
	defer cancel()
	if err := s.client.Forget(ctx, cmd); err != nil {
		n.log.Debug("forget ended command", "sandbox", s.id, "command", cmd, "err", err)
	}
}

// Stdin appends r to a command's stdin, closing it after when eof is set.
func (n *Node) Stdin(ctx context.Context, sandboxID, commandID string, r io.Reader, eof bool) error {
	s, err := n.get(sandboxID)
	if err != nil {
		return err
	}
	return s.client.Stdin(ctx, commandID, r, eof)
}

// Signal sends a signal to a command's process group.
func (n *Node) Signal(ctx context.Context, sandboxID, commandID, sig string) error {
	s, err := n.get(sandboxID)
	if err != nil {
		return err
	}
	return s.client.Signal(ctx, commandID, sig)
}

// Resize changes a PTY command's terminal size.
func (n *Node) Resize(ctx context.Context, sandboxID, commandID string, size node.TermSize) error {
	s, err := n.get(sandboxID)
	if err != nil {
		return err
	}
	return s.client.Resize(ctx, commandID, wire.Size{Cols: size.Cols, Rows: size.Rows})
}
