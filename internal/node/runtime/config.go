// Package runtime runs sandboxes as OCI containers with runc.
//
// A sandbox's host side lives in its state directory, which is also its
// runc bundle and is never visible inside the sandbox:
//
//	<StateDir>/<id>/config.json  the OCI spec
//	<StateDir>/<id>/disk.img     sparse ext4 image: the disk quota
//	<StateDir>/<id>/disk/        disk.img mounted through a loop device
//	<StateDir>/<id>/disk/upper   overlay upper layer (the sandbox's own files)
//	<StateDir>/<id>/disk/work    overlay work directory
//	<StateDir>/<id>/disk/agent.log  stdout and stderr of runc and cove-agent
//	                             (on the sandbox's disk, so within its quota)
//	<StateDir>/<id>/rootfs/      overlay: the image's idmapped view (lower) + upper
//	<StateDir>/<id>/lower/       where that view is attached while the
//	                             overlay is mounted (empty after)
//	<StateDir>/<id>/agent.sock   the agent's listening socket (host side)
//	<StateDir>/<id>/init.pid     the PID runc wrote for the sandbox's init
//	<StateDir>/<id>/init         that PID and its start time (init_linux.go)
//	<StateDir>/<id>/volume<i>/   the idmapped view of its i-th volume, which
//	                             runc binds at the volume's path
//
// Nothing of a sandbox lives only in memory: after a restart of the host
// process, Attach finds it again and Destroy removes it.
package runtime

import (
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/cove-dev/cove/internal/node/image"
)

// Config configures a Runtime.
type Config struct {
	// StateDir holds one directory per sandbox. Required; it and its
	// parents must be searchable (x) by every sandbox's mapped root, which
	// runc's init runs as while it sets up the root filesystem.
	StateDir string
	// RuncPath is the OCI runtime binary; default "runc".
	RuncPath string
	// RuncRoot is runc's --root, where it keeps its container state;
	// default <StateDir>/../runc.
	RuncRoot string
	// AgentPath is the host path of the static cove-agent binary, bind-
	// mounted read-only into every sandbox. Required.
	AgentPath string
	// VolumeDir holds the team volumes' disks, one directory each
	// (volume_linux.go); default <StateDir>/../volumes.
	VolumeDir string
	// EmptyDiskDir keeps an empty disk per size, <MiB>.img, which new
	// sandbox disks are sparse copies of (emptydisk_linux.go); default
	// <StateDir>/../empty-disks.
	EmptyDiskDir string
	// CgroupParent is the cgroup under which each sandbox gets
	// <CgroupParent>/<id> in every hierarchy; default "/cove".
	CgroupParent string
	// Devices edits the runtime spec of a sandbox that was given devices
	// (Spec.Devices): the node's CDI specs. Nil: no sandbox may have any.
	Devices DeviceInjector
}

// DeviceInjector edits a container's runtime spec for devices named the
// Container Device Interface's way (vendor/class=name): their device
// nodes, mounts and hooks (internal/node/gpu).
type DeviceInjector interface {
	Inject(spec *specs.Spec, devices []string) error
}

// WithDefaults returns c with its defaults filled in.
func (c Config) WithDefaults() Config {
	if c.RuncPath == "" {
		c.RuncPath = "runc"
	}
	if c.RuncRoot == "" && c.StateDir != "" {
		c.RuncRoot = filepath.Join(filepath.Dir(filepath.Clean(c.StateDir)), "runc")
	}
	if c.VolumeDir == "" && c.StateDir != "" {
		c.VolumeDir = filepath.Join(filepath.Dir(filepath.Clean(c.StateDir)), "volumes")
	}
	if c.EmptyDiskDir == "" && c.StateDir != "" {
		c.EmptyDiskDir = filepath.Join(filepath.Dir(filepath.Clean(c.StateDir)), "empty-disks")
	}
	if c.CgroupParent == "" {
		c.CgroupParent = "/cove"
	}
	return c
}

// Validate checks c, defaults included.
func (c Config) Validate() error {
	var errs []error
	if c.StateDir == "" || !filepath.IsAbs(c.StateDir) {
		errs = append(errs, fmt.Errorf("state dir %q: not an absolute path", c.StateDir))
	}
	if c.RuncRoot == "" || !filepath.IsAbs(c.RuncRoot) {
		errs = append(errs, fmt.Errorf("runc root %q: not an absolute path", c.RuncRoot))
	}
	if c.VolumeDir == "" || !filepath.IsAbs(c.VolumeDir) {
		errs = append(errs, fmt.Errorf("volume dir %q: not an absolute path", c.VolumeDir))
	}
	if c.AgentPath == "" || !filepath.IsAbs(c.AgentPath) {
		errs = append(errs, fmt.Errorf("agent path %q: not an absolute path", c.AgentPath))
	}
	if c.RuncPath == "" {
		errs = append(errs, errors.New("runc path: empty"))
	}
	if !strings.HasPrefix(c.CgroupParent, "/") || filepath.Clean(c.CgroupParent) != c.CgroupParent || c.CgroupParent == "/" {
		errs = append(errs, fmt.Errorf("cgroup parent %q: not a clean absolute path below /", c.CgroupParent))
	}
	// Overlay options are comma separated and lowerdir is colon separated.
	for _, p := range []string{c.StateDir, c.AgentPath} {
		if strings.ContainsAny(p, ",:\\\n") {
			errs = append(errs, fmt.Errorf("path %q: has one of , : \\ or a newline", p))
		}
	}
	return errors.Join(errs...)
}

// Spec describes one sandbox.
type Spec struct {
	// ID names the sandbox: letters, digits, '_' and '-', at most 64.
	ID string
	// Hostname inside the sandbox; default ID.
	Hostname string
	// Image is the read-only lower layer of the root filesystem, seen
	// through an idmapped mount with IDs.
	Image image.Image
	// IDs is the sandbox's host uid/gid range: its uid and gid 0 are
	// IDs.HostID on the host. Zero means image.LegacyIDMap, the range
	// sandboxes shared before each had its own.
	IDs image.IDMap
	// DiskIDs is the range a restored Disk was written in, when another
	// sandbox wrote it (a cached setup): its files are moved into IDs
	// before the sandbox starts. Zero means IDs.
	DiskIDs image.IDMap
	// CPUs is the CPU quota in cores (0.5 is half a core), at least MinCPUs.
	CPUs float64
	// MemoryMiB limits memory, at least MinMemoryMiB; the sandbox gets no
	// swap.
	MemoryMiB int64
	// DiskMiB is the size of the sandbox's own disk (its upper layer).
	// At least MinDiskMiB.
	DiskMiB int64
	// Pids limits the number of processes and threads (the agent's
	// included), at least MinPids.
	Pids int64
	// Workdir is the agent's default working directory; default
	// "/workspace".
	Workdir string
	// ResolvConf, when set, is a host file bind-mounted read-only at
	// /etc/resolv.conf: the node's resolver for this sandbox.
	ResolvConf string
	// CABundle, when set, is a host file bind-mounted read-only at
	// CABundlePath: the image's system CA bundle plus the certificates the
	// operator trusts.
	CABundle string
	// Disk, when set, is a disk image made by an earlier start of this
	// sandbox (restored from a save): Start moves it into place instead of
	// making a new, empty disk.
	Disk string
	// Layers are frozen disks (snapshots, AddLayer) the sandbox stands
	// on, top first: overlay lower layers between its own upper and the
	// image. The node must hold each.
	Layers []Layer
	// Devices are CDI device names (nvidia.com/gpu=0) whose nodes, mounts
	// and hooks Config.Devices adds to the sandbox's runtime spec.
	Devices []string
	// Volumes are team volumes of the node (CreateVolume) mounted in the
	// sandbox, each through an idmapped view in the sandbox's range.
	Volumes []VolumeMount
	// SetID lets set-uid and set-gid programs (sudo) raise privileges
	// inside the sandbox: its processes run without no_new_privs and its
	// root filesystem is mounted without nosuid. They stay inside its
	// user namespace, under the same seccomp filter and capability
	// bounding set (docs/security.md).
	SetID bool
}

// CABundlePath is the system CA bundle of Debian-like images, which
// OpenSSL, curl, git and Python read; Spec.CABundle replaces it.
const CABundlePath = "/etc/ssl/certs/ca-certificates.crt"

// The smallest sandbox: below these the agent itself cannot run (its
// threads count as pids) or the kernel refuses the setting (a CFS quota
// under 1 ms).
const (
	MinDiskMiB   = 8
	MinMemoryMiB = 16
	MinPids      = 16
	MinCPUs      = 0.01
)

// MaxLayers bounds the layers one sandbox stands on (a snapshot of a
// fork of a snapshot …): overlay takes at most 500 lower layers, and each
// costs a mount at every start.
const MaxLayers = 64

var idPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$`)

// ValidID reports whether id may name a sandbox: it becomes a directory
// name, a cgroup name and a runc container ID.
func ValidID(id string) bool { return idPattern.MatchString(id) }

func (s Spec) withDefaults() Spec {
	if s.Hostname == "" {
		s.Hostname = s.ID
	}
	if s.Workdir == "" {
		s.Workdir = "/workspace"
	}
	s.IDs = s.IDs.OrLegacy()
	return s
}

// validate checks s, defaults included.
func (s Spec) validate() error {
	var errs []error
	if !ValidID(s.ID) {
		errs = append(errs, fmt.Errorf("sandbox id %q: want 1 to 64 of [A-Za-z0-9_-]", s.ID))
	}
	if len(s.Hostname) > 64 || strings.ContainsAny(s.Hostname, "/\x00 \n") {
		errs = append(errs, fmt.Errorf("hostname %q: not a host name", s.Hostname))
	}
	if s.Image.Rootfs == "" || !filepath.IsAbs(s.Image.Rootfs) || strings.ContainsAny(s.Image.Rootfs, ",:\\\n") {
		errs = append(errs, fmt.Errorf("image %s: its rootfs path is not absolute or holds one of , : \\ or a newline", s.Image.Name))
	}
	if s.Image.Format != image.Format {
		errs = append(errs, fmt.Errorf("image %s has format %d, want %d", s.Image.Name, s.Image.Format, image.Format))
	}
	if err := s.IDs.Validate(); err != nil {
		errs = append(errs, err)
	}
	if !(s.CPUs >= MinCPUs && s.CPUs <= 1024) {
		errs = append(errs, fmt.Errorf("cpus %v: want %v to 1024", s.CPUs, MinCPUs))
	}
	if s.MemoryMiB < MinMemoryMiB {
		errs = append(errs, fmt.Errorf("memory %d MiB: want at least %d", s.MemoryMiB, MinMemoryMiB))
	}
	if s.DiskMiB < MinDiskMiB {
		errs = append(errs, fmt.Errorf("disk %d MiB: want at least %d", s.DiskMiB, MinDiskMiB))
	}
	if s.Pids < MinPids {
		errs = append(errs, fmt.Errorf("pids %d: want at least %d", s.Pids, MinPids))
	}
	if len(s.Layers) > MaxLayers {
		errs = append(errs, fmt.Errorf("%d layers: want at most %d", len(s.Layers), MaxLayers))
	}
	for _, l := range s.Layers {
		if !ValidID(l.Name) {
			errs = append(errs, fmt.Errorf("layer %q: invalid name", l.Name))
		}
	}
	if len(s.Volumes) > MaxVolumes {
		errs = append(errs, fmt.Errorf("%d volumes: want at most %d", len(s.Volumes), MaxVolumes))
	}
	for _, v := range s.Volumes {
		if err := v.validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if !filepath.IsAbs(s.Workdir) {
		errs = append(errs, fmt.Errorf("workdir %q: not absolute", s.Workdir))
	}
	return errors.Join(errs...)
}
