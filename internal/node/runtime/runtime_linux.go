package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/cove-dev/cove/internal/mountinfo"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/agent/client"
	"github.com/cove-dev/cove/internal/agent/wire"
	"github.com/cove-dev/cove/internal/fsspread"
	"github.com/cove-dev/cove/internal/node/image"
)

// Timeouts of the runtime.
const (
	// PingTimeout bounds how long Start waits for a new agent to answer.
	PingTimeout = 10 * time.Second
	// cleanupTimeout bounds the undoing of a failed Start.
	cleanupTimeout = 30 * time.Second
	// stopTimeout bounds the wait for a killed sandbox to die.
	stopTimeout = 5 * time.Second
)

// Files of a sandbox's state directory.
const (
	configFile = "config.json"
	diskImage  = "disk.img"
	diskDir    = "disk"
	rootfsDir  = "rootfs"
	// lowerDir is where the idmapped view of the image is attached while
	// the overlay is mounted over it.
	lowerDir  = "lower"
	agentSock = "agent.sock"
	// agentLog is on the sandbox's disk, beside (not in) its upper layer:
	// root in the sandbox can write to the agent's stdout through
	// /proc/1/fd/1, so the log must count against the sandbox's quota,
	// not fill the host's disk.
	agentLog = diskDir + "/agent.log"
)

// maxSocketPath is the longest path a unix socket address holds.
const maxSocketPath = 107

// Runtime starts, finds and destroys sandboxes. It keeps no state in
// memory: everything is in the state directories, runc's root and the
// kernel, so a new Runtime over the same directories takes over.
//
// Calls for different sandboxes may run concurrently; calls for the same
// sandbox must not (the caller's lifecycle state machine orders them).
type Runtime struct {
	cfg  Config
	log  *slog.Logger
	runc runc

	nofile    func() uint64 // once: raises this process's hard limit
	swapLimit func() bool   // once: looks for swap accounting
	// cgroups finds the cpu and memory accounting hierarchies, once.
	cgroups func() (*CgroupReader, error)
	// userns keeps the user namespaces of ID ranges, for idmapped mounts.
	userns usernsCache
	// spread marks StateDir and RuncRoot once, so that the sandboxes'
	// directories in them are spread over the filesystem (fsspread).
	spread sync.Once
	// emptyMu makes one empty disk at a time (emptydisk_linux.go).
	emptyMu sync.Mutex
}

func (r *Runtime) host(id string, ids image.IDMap) host {
	return host{
		ids:         ids,
		agentPath:   r.cfg.AgentPath,
		cgroupsPath: r.cgroupPath(id),
		nofile:      r.nofile(),
		swapLimit:   r.swapLimit(),
	}
}

// New returns a Runtime for cfg; it checks cfg and that the agent binary
// exists, and starts nothing.
func New(cfg Config, log *slog.Logger) (*Runtime, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("runtime config: %w", err)
	}
	st, err := os.Stat(cfg.AgentPath)
	if err != nil {
		return nil, fmt.Errorf("runtime config: agent: %w", err)
	}
	if !st.Mode().IsRegular() || st.Mode()&0o001 == 0 {
		return nil, fmt.Errorf("runtime config: agent %s: not a regular file executable by others (%v)", cfg.AgentPath, st.Mode())
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &Runtime{cfg: cfg, log: log, runc: runc{path: cfg.RuncPath, root: cfg.RuncRoot}}
	r.nofile = sync.OnceValue(func() uint64 { return raiseNofile(Nofile, log) })
	r.cgroups = sync.OnceValues(NewCgroupReader)
	r.swapLimit = sync.OnceValue(func() bool {
		ok := swapAccounting()
		if !ok {
			log.Warn("no swap accounting (memory.memsw): sandboxes may swap if the host has swap")
		}
		return ok
	})
	return r, nil
}

// raiseNofile raises the hard RLIMIT_NOFILE of this process to want, so
// that runc, which inherits it, may give it to the sandbox: inside the user
// namespace a hard limit can only be lowered. It returns what it got.
func raiseNofile(want uint64, log *slog.Logger) uint64 {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		log.Warn("get nofile limit", "err", err)
		return want
	}
	if lim.Max >= want {
		return want
	}
	raised := syscall.Rlimit{Cur: lim.Cur, Max: want}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &raised); err != nil {
		log.Warn("sandboxes get a lower nofile limit", "limit", lim.Max, "want", want, "err", err)
		return lim.Max
	}
	return want
}

// Config returns the runtime's configuration, defaults included.
func (r *Runtime) Config() Config { return r.cfg }

// StateDir returns the state directory of sandbox id.
func (r *Runtime) StateDir(id string) string { return filepath.Join(r.cfg.StateDir, id) }

// SocketPath returns the host path of sandbox id's agent socket.
func (r *Runtime) SocketPath(id string) string { return filepath.Join(r.StateDir(id), agentSock) }

func (r *Runtime) cgroupPath(id string) string { return r.cfg.CgroupParent + "/" + id }

// Start creates sandbox s and returns a client of its agent, which has
// answered a ping. On failure it undoes everything it did.
func (r *Runtime) Start(ctx context.Context, s Spec) (_ *client.Client, err error) {
	s = s.withDefaults()
	if err := s.validate(); err != nil {
		return nil, api.Errorf(api.CodeInvalidArgument, "start sandbox %s: %v", s.ID, err)
	}
	id := s.ID
	log := r.log.With("sandbox", id)
	dir := r.StateDir(id)
	if sock := filepath.Join(dir, agentSock); len(sock) > maxSocketPath {
		return nil, fmt.Errorf("start sandbox %s: socket path %s is longer than %d bytes", id, sock, maxSocketPath)
	}
	if _, err := os.Stat(s.Image.Rootfs); err != nil {
		return nil, fmt.Errorf("start sandbox %s: image %s: %w", id, s.Image.Name, err)
	}
	for _, d := range []string{r.cfg.StateDir, r.cfg.RuncRoot} {
		if err := os.MkdirAll(d, 0o711); err != nil {
			return nil, fmt.Errorf("start sandbox %s: %w", id, err)
		}
	}
	r.spread.Do(func() {
		for _, d := range []string{r.cfg.StateDir, r.cfg.RuncRoot} {
			if err := fsspread.Subdirs(d); err != nil {
				r.log.Debug("sandboxes' directories are placed by the filesystem", "err", err)
			}
		}
	})
	// runc's init runs as the mapped root while it sets up the root
	// filesystem: it must get to the rootfs and the agent on the host.
	// (The image's tree it never walks: the overlay looks its lower layer
	// up with the mounter's rights.)
	for _, p := range []string{r.cfg.StateDir, filepath.Dir(r.cfg.AgentPath)} {
		if err := checkSearchable(p, s.IDs); err != nil {
			return nil, fmt.Errorf("start sandbox %s: %w", id, err)
		}
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil, api.Errorf(api.CodeConflict, "sandbox %s exists", id)
		}
		return nil, fmt.Errorf("start sandbox %s: %w", id, err)
	}
	// From here on, a failure destroys whatever was made.
	defer func() {
		if err == nil {
			return
		}
		if cerr := context.Cause(ctx); cerr != nil && !errors.Is(err, cerr) {
			err = fmt.Errorf("%w (%w)", err, cerr)
		}
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		if derr := r.Destroy(cctx, id); derr != nil {
			err = errors.Join(err, fmt.Errorf("clean up: %w", derr))
		}
	}()
	if err := privateStateDir(dir, s.IDs); err != nil {
		return nil, fmt.Errorf("start sandbox %s: %w", id, err)
	}

	t0 := time.Now()
	if err := r.makeRootfs(ctx, dir, s); err != nil {
		return nil, fmt.Errorf("start sandbox %s: %w", id, err)
	}
	t1 := time.Now()
	spec := ociSpec(s, r.host(id, s.IDs))
	vols, err := r.volumeMounts(dir, s)
	if err != nil {
		return nil, fmt.Errorf("start sandbox %s: %w", id, err)
	}
	spec.Mounts = append(spec.Mounts, vols...)
	if len(s.Devices) > 0 {
		if r.cfg.Devices == nil {
			return nil, api.Errorf(api.CodeUnprocessable, "sandbox %s was given devices %v, but this node has no CDI devices", id, s.Devices)
		}
		if err := r.cfg.Devices.Inject(spec, s.Devices); err != nil {
			return nil, fmt.Errorf("start sandbox %s: %w", id, err)
		}
	}
	if err := writeSpec(filepath.Join(dir, configFile), spec); err != nil {
		return nil, fmt.Errorf("start sandbox %s: write spec: %w", id, err)
	}
	if err := r.runcRun(ctx, dir, id); err != nil {
		return nil, fmt.Errorf("start sandbox %s: %w", id, err)
	}
	if err := recordInit(dir); err != nil {
		// State asks runc instead.
		log.Warn("record the sandbox's init", "err", err)
	}
	t2 := time.Now()
	c, err := r.waitAgent(ctx, id, PingTimeout)
	if err != nil {
		return nil, fmt.Errorf("start sandbox %s: %w", id, err)
	}
	log.Debug("sandbox started", "rootfs", t1.Sub(t0), "runc", t2.Sub(t1), "agent", time.Since(t2))
	return c, nil
}

// privateStateDir makes a sandbox's state dir passable for the mapped root
// and closed to everyone else: root:<mapped root's group>, 0710. runc's
// init runs as the mapped root while it sets up the root filesystem, so it
// must get through to rootfs/; other host users can neither list the dir
// nor reach the sandbox's files, disk or socket through it (its path is no
// secret: the host's mount table shows it).
func privateStateDir(dir string, ids image.IDMap) error {
	if err := os.Chown(dir, 0, int(ids.HostID)); err != nil {
		return err
	}
	return os.Chmod(dir, 0o710)
}

// checkSearchable checks that the mapped root of ids can search dir and
// each of its parents.
func checkSearchable(dir string, ids image.IDMap) error {
	for p := filepath.Clean(dir); ; p = filepath.Dir(p) {
		st, err := os.Stat(p)
		if err != nil {
			return err
		}
		sys, ok := st.Sys().(*syscall.Stat_t)
		mapped := ok && sys.Uid >= ids.HostID && sys.Uid-ids.HostID < ids.Size
		if !st.IsDir() || st.Mode().Perm()&0o001 == 0 && !(mapped && st.Mode().Perm()&0o100 != 0) {
			return fmt.Errorf("%s (%v): the sandbox's root (host uid %d) cannot search it; it needs o+x", p, st.Mode(), ids.HostID)
		}
		if p == "/" || p == "." {
			return nil
		}
	}
}

// makeRootfs makes the disk, mounts it, and mounts the overlay: the
// image's idmapped view below, the disk's upper dir above. Files the
// sandbox writes land on its disk owned in its own host range.
func (r *Runtime) makeRootfs(ctx context.Context, dir string, s Spec) error {
	root := s.IDs.HostID
	img := filepath.Join(dir, diskImage)
	if s.Disk != "" {
		if err := os.Rename(s.Disk, img); err != nil {
			return fmt.Errorf("take restored disk: %w", err)
		}
	} else if err := r.newDisk(ctx, img, s.DiskMiB); err != nil {
		return fmt.Errorf("make disk: %w", err)
	}
	disk := filepath.Join(dir, diskDir)
	if err := os.Mkdir(disk, 0o700); err != nil {
		return err
	}
	// nosuid and nodev on both mounts: a set-id file or a device node the
	// sandbox made is inert, also to a host process that meets it.
	if err := mountLoop(img, disk, unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOATIME, true); err != nil {
		return fmt.Errorf("mount disk: %w", err)
	}
	if s.Disk == "" {
		// A copy of the empty disk: its root is host root's.
		if err := os.Chown(disk, int(root), int(root)); err != nil {
			return err
		}
	}
	if s.Disk != "" && s.DiskIDs.Size > 0 && s.DiskIDs.HostID != root {
		if err := image.Reown(ctx, disk, s.DiskIDs, s.IDs.OrLegacy()); err != nil {
			return fmt.Errorf("move the disk's files into the sandbox's range: %w", err)
		}
	}
	upper, work := filepath.Join(disk, "upper"), filepath.Join(disk, "work")
	for _, d := range []string{upper, work} {
		if err := os.Mkdir(d, 0o755); err != nil && !(s.Disk != "" && errors.Is(err, fs.ErrExist)) {
			return err
		}
		if err := os.Chown(d, int(root), int(root)); err != nil {
			return err
		}
	}
	rootfs := filepath.Join(dir, rootfsDir)
	if err := os.Mkdir(rootfs, 0o755); err != nil {
		return err
	}
	lower := filepath.Join(dir, lowerDir)
	if err := os.Mkdir(lower, 0o700); err != nil {
		return err
	}
	if err := r.mountIDMapped(s.Image.Rootfs, lower, s.IDs); err != nil {
		return fmt.Errorf("mount image %s: %w", s.Image.Name, err)
	}
	layers, err := r.layerMounts(dir, s)
	if err != nil {
		return err
	}
	lowers := strings.Join(append(layers, lower), ":")
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", lowers, upper, work)
	if err := unix.Mount("overlay", rootfs, "overlay", rootfsFlags(s), opts); err != nil {
		return fmt.Errorf("mount overlay: %w", err)
	}
	// The overlay keeps a private clone of its lower mounts: the attached
	// views are not needed any more.
	if err := unmount(lower); err != nil {
		return err
	}
	return unmountLayerViews(dir)
}

// rootfsFlags are the mount flags of a sandbox's root filesystem: nosuid
// unless set-uid programs are to work in it (Spec.SetID).
func rootfsFlags(s Spec) uintptr {
	if s.SetID {
		return unix.MS_NODEV
	}
	return unix.MS_NOSUID | unix.MS_NODEV
}

func writeSpec(path string, spec any) error {
	b, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o600)
}

// runcRun runs the sandbox detached, handing it the agent's listening
// socket as fd 3. The host's copy of the listener is closed on return: the
// host only dials.
func (r *Runtime) runcRun(ctx context.Context, dir, id string) error {
	sock := filepath.Join(dir, agentSock)
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		return fmt.Errorf("listen for agent: %w", err)
	}
	l.SetUnlinkOnClose(false)
	defer l.Close()
	if err := os.Chmod(sock, 0o600); err != nil {
		return fmt.Errorf("listen for agent: %w", err)
	}
	lf, err := l.File()
	if err != nil {
		return fmt.Errorf("listen for agent: %w", err)
	}
	defer lf.Close()
	logf, err := os.OpenFile(filepath.Join(dir, agentLog), os.O_WRONLY|os.O_CREATE|os.O_APPEND|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()

	cmd := r.runc.command(ctx, "run", "--detach", "--preserve-fds", "1", "--pid-file", filepath.Join(dir, initPIDFile), "--bundle", dir, id)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.ExtraFiles = []*os.File{lf}
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("runc run: %w: %s", err, r.logTail(id))
	}
	return nil
}

// waitAgent pings the agent of id until it answers, the sandbox stops, or
// timeout passes.
func (r *Runtime) waitAgent(ctx context.Context, id string, timeout time.Duration) (*client.Client, error) {
	ctx, cancel := context.WithTimeoutCause(ctx, timeout, fmt.Errorf("no answer from agent in %v", timeout))
	defer cancel()
	c := client.Dial(r.SocketPath(id))
	delay := time.Millisecond
	lastCheck := time.Now()
	for {
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		p, err := c.Ping(pctx)
		pcancel()
		if err == nil {
			if p.Version != wire.Version {
				c.Close()
				return nil, fmt.Errorf("agent speaks protocol %d, want %d", p.Version, wire.Version)
			}
			return c, nil
		}
		// A dead sandbox never answers: say so early.
		if time.Since(lastCheck) > 200*time.Millisecond {
			lastCheck = time.Now()
			st, ok, serr := r.runc.state(ctx, id)
			if serr == nil && (!ok || st.Status == "stopped") {
				c.Close()
				return nil, fmt.Errorf("sandbox stopped before its agent answered (%v): %s", err, r.logTail(id))
			}
		}
		select {
		case <-ctx.Done():
			c.Close()
			return nil, fmt.Errorf("ping agent: %w (last: %v): %s", context.Cause(ctx), err, r.logTail(id))
		case <-time.After(delay):
		}
		delay = min(2*delay, 50*time.Millisecond)
	}
}

// logTail returns the end of id's agent.log, for error messages.
func (r *Runtime) logTail(id string) string {
	f, err := os.Open(filepath.Join(r.StateDir(id), agentLog))
	if err != nil {
		return "no agent log"
	}
	defer f.Close()
	const max = 2048
	if st, err := f.Stat(); err == nil && st.Size() > max {
		f.Seek(st.Size()-max, io.SeekStart)
	}
	b, _ := io.ReadAll(io.LimitReader(f, max))
	s := strings.TrimSpace(strings.ToValidUTF8(string(b), "?"))
	if s == "" {
		return "agent log empty"
	}
	return "agent log: " + s
}

// Attach returns a client of the agent of a sandbox started earlier,
// perhaps by another process: runc must say it runs and its agent must
// answer.
func (r *Runtime) Attach(ctx context.Context, id string) (*client.Client, error) {
	if !ValidID(id) {
		return nil, api.Errorf(api.CodeInvalidArgument, "sandbox id %q: invalid", id)
	}
	st, ok, err := r.runc.state(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("attach sandbox %s: %w", id, err)
	}
	if !ok {
		if _, err := os.Stat(r.StateDir(id)); err == nil {
			return nil, api.Errorf(api.CodeNotFound, "sandbox %s: runc has no container (state dir left)", id)
		}
		return nil, api.Errorf(api.CodeNotFound, "sandbox %s not found", id)
	}
	if st.Status != "running" {
		return nil, api.Errorf(api.CodePreconditionFailed, "sandbox %s is %s, not running", id, st.Status)
	}
	// A node that died while it froze the disk for a snapshot left it
	// frozen: thaw it (a disk not frozen refuses, which is fine).
	thaw(filepath.Join(r.StateDir(id), diskDir))
	c, err := r.waitAgent(ctx, id, 5*time.Second)
	if err != nil {
		return nil, fmt.Errorf("attach sandbox %s: %w", id, err)
	}
	return c, nil
}

// State is what the runtime knows of a running sandbox.
type State struct {
	// Status is runc's: "created", "running", "paused" or "stopped".
	Status string
	// PID is the host PID of the sandbox's init (cove-agent); 0 when
	// stopped. Network setup enters its namespaces through /proc/PID/ns.
	PID int
}

// State returns the state of sandbox id: running with its init's PID
// when the init Start recorded still runs (no sandbox is ever paused),
// else what runc says.
func (r *Runtime) State(ctx context.Context, id string) (State, error) {
	if !ValidID(id) {
		return State{}, api.Errorf(api.CodeInvalidArgument, "sandbox id %q: invalid", id)
	}
	if pid, ok := livePID(r.StateDir(id)); ok {
		return State{Status: "running", PID: pid}, nil
	}
	st, ok, err := r.runc.state(ctx, id)
	if err != nil {
		return State{}, fmt.Errorf("state of sandbox %s: %w", id, err)
	}
	if !ok {
		return State{}, api.Errorf(api.CodeNotFound, "sandbox %s not found", id)
	}
	if st.Status == "stopped" {
		st.PID = 0
	}
	return State{Status: st.Status, PID: st.PID}, nil
}

// Destroy kills sandbox id and removes all it left: runc's container, the
// mounts, the loop device, the cgroups and the state directory. Each step
// tolerates that an earlier one is missing, so Destroy can finish what an
// interrupted Start or Destroy left, and destroying twice is no error.
func (r *Runtime) Destroy(ctx context.Context, id string) error {
	if !ValidID(id) {
		return api.Errorf(api.CodeInvalidArgument, "sandbox id %q: invalid", id)
	}
	dir := r.StateDir(id)
	errs := r.teardown(ctx, id)
	// The state directory goes last, and only when all else went: while
	// it is there, List reports the sandbox and Destroy can be retried.
	if len(errs) == 0 {
		if err := removeStateDir(dir); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("destroy sandbox %s: %w", id, err)
	}
	return nil
}

// ErrNoDisk is Stop's error for a state directory without its disk image.
// Only Destroy removes the image, so what is left is a Destroy cut short.
var ErrNoDisk = errors.New("its disk image is gone")

// Stop ends sandbox id's processes and unmounts its files, keeping only
// its disk image, whose path it returns: the sandbox's own files, ready to
// be saved. Destroy removes what is left.
func (r *Runtime) Stop(ctx context.Context, id string) (string, error) {
	if !ValidID(id) {
		return "", api.Errorf(api.CodeInvalidArgument, "sandbox id %q: invalid", id)
	}
	dir := r.StateDir(id)
	img := filepath.Join(dir, diskImage)
	if _, err := os.Stat(img); errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("stop sandbox %s: %w", id, ErrNoDisk)
	} else if err != nil {
		return "", fmt.Errorf("stop sandbox %s: %w", id, err)
	}
	if err := r.stopContainer(ctx, id); err != nil {
		return "", fmt.Errorf("stop sandbox %s: %w", id, err)
	}
	// The disk image is saved next: what the sandbox wrote must be in it
	// even if an unmount below can only detach lazily (a process of the
	// sandbox not reaped yet keeps its mount busy).
	if err := syncDir(filepath.Join(dir, diskDir)); err != nil {
		return "", fmt.Errorf("stop sandbox %s: flush its disk: %w", id, err)
	}
	if err := errors.Join(r.teardown(ctx, id)...); err != nil {
		return "", fmt.Errorf("stop sandbox %s: %w", id, err)
	}
	// A lazily detached disk lets go once its last user is gone: wait for
	// that, so nothing writes to the image while it is saved.
	for i := 0; ; i++ {
		devs, err := loopsBackedBy(img)
		if err != nil || len(devs) == 0 {
			break
		}
		if i == 200 {
			r.log.Warn("disk still attached after stop; saving what was flushed", "sandbox", id, "loops", devs)
			break
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		detachLoops(img)
	}
	return img, nil
}

// syncDir flushes the filesystem holding dir; a dir that is not there (a
// disk already unmounted) has nothing to flush.
func syncDir(dir string) error {
	f, err := os.Open(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	return unix.Syncfs(int(f.Fd()))
}

// teardown kills sandbox id and undoes its mounts and cgroups, leaving its
// state directory and disk image. Each step tolerates that an earlier one
// is missing; it returns what failed.
func (r *Runtime) teardown(ctx context.Context, id string) []error {
	dir := r.StateDir(id)
	var errs []error
	if err := r.stopContainer(ctx, id); err != nil {
		errs = append(errs, err)
	}
	if err := removeCgroup(ctx, r.cgroupPath(id)); err != nil {
		errs = append(errs, err)
	}
	// The overlay first: its upper layer is on the disk. The image's
	// view is left attached only by a start cut short.
	if err := unmount(filepath.Join(dir, rootfsDir)); err != nil {
		errs = append(errs, err)
	}
	if err := unmount(filepath.Join(dir, lowerDir)); err != nil {
		errs = append(errs, err)
	}
	if err := unmountLayerViews(dir); err != nil {
		errs = append(errs, err)
	}
	// The volumes' views: the volumes stay, mounted on the host.
	if err := unmountVolumeViews(dir); err != nil {
		errs = append(errs, err)
	}
	if err := unmount(filepath.Join(dir, diskDir)); err != nil {
		errs = append(errs, err)
	}
	// A deleted image's device clears itself with its last user, and
	// looking for it would read every loop device of the host.
	if img := filepath.Join(dir, diskImage); exists(img) {
		if err := detachLoops(img); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// stopContainer kills every process of container id, waits for its init
// to die, and deletes it from runc.
func (r *Runtime) stopContainer(ctx context.Context, id string) error {
	// A live init found through its record spares a `runc state`.
	pid, running := livePID(r.StateDir(id))
	var err error
	if !running {
		var st runcState
		var ok bool
		st, ok, err = r.runc.state(ctx, id)
		if err == nil && !ok {
			return r.runc.forget(id)
		}
		pid, running = st.PID, ok && st.Status != "stopped"
	}
	if running {
		// Errors are for delete --force to settle: it may just have died.
		r.runc.run(ctx, "kill", "--all", id, "KILL")
		waitExit(ctx, pid, stopTimeout)
	}
	if _, derr := r.runc.run(ctx, "delete", "--force", id); derr != nil {
		_, ok, serr := r.runc.state(ctx, id)
		if serr == nil && !ok {
			return nil // gone after all
		}
		return errors.Join(err, derr)
	}
	return nil
}

// waitExit waits until process pid has exited, at most timeout.
func waitExit(ctx context.Context, pid int, timeout time.Duration) {
	if pid <= 0 {
		return
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return // already gone (ESRCH)
	}
	defer unix.Close(fd)
	deadline := time.Now().Add(timeout)
	for {
		wait := time.Until(deadline)
		if d, ok := ctx.Deadline(); ok && time.Until(d) < wait {
			wait = time.Until(d)
		}
		// Short slices, so a cancelled ctx is noticed.
		ms := int(min(wait, 100*time.Millisecond) / time.Millisecond)
		if ms <= 0 || ctx.Err() != nil {
			return
		}
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, ms)
		if n > 0 || (err != nil && !errors.Is(err, unix.EINTR)) {
			return
		}
	}
}

// removeStateDir removes dir unless something is still mounted under it:
// removing through a mount would delete the files of the mounted file
// system instead of failing.
func removeStateDir(dir string) error {
	mounts, err := mountinfo.Under(dir)
	if err != nil {
		return err
	}
	if len(mounts) > 0 {
		return fmt.Errorf("keep %s: still mounted: %s", dir, strings.Join(mounts, ", "))
	}
	// The disk image goes last: a node killed part way through leaves it
	// with its state dir, and a sleep cut short there is finished by
	// saving it again, where a dir without it could not be.
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	for _, e := range entries {
		if e.Name() == diskImage {
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return os.RemoveAll(dir)
}

// List returns the IDs of the sandboxes that have a state directory or a
// runc container, sorted: what Destroy may need to clean after a crash.
func (r *Runtime) List(ctx context.Context) ([]string, error) {
	entries, err := os.ReadDir(r.cfg.StateDir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	var ids []string
	for _, e := range entries {
		if e.IsDir() && ValidID(e.Name()) {
			ids = append(ids, e.Name())
		}
	}
	running, err := r.runc.list(ctx)
	if err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	ids = append(ids, running...)
	slices.Sort(ids)
	return slices.Compact(ids), nil
}
