package runtime

import (
	"fmt"
	"os"
	goruntime "runtime"
	"strconv"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/cove-dev/cove/internal/node/image"
)

// Each sandbox has a host uid/gid range of its own, and the image it starts
// from is one tree on disk with the image's own IDs (root's files belong to
// uid 0). The sandbox sees the image through an idmapped mount: a detached
// bind mount of the tree (open_tree) whose IDs go through the sandbox's
// user namespace mapping (mount_setattr with MOUNT_ATTR_IDMAP), attached in
// the state dir (move_mount) and used as the overlay's lower layer. runc
// 1.1.5 cannot ask for idmapped mounts, so the host makes the root
// filesystem before runc sees it. The overlay holds its own private copy of
// the lower mount, so the attached one is detached again right away.

// usernsFD returns a descriptor of a new user namespace mapping uid and gid
// 0 to ids.HostID for ids.Size IDs: what an idmapped mount takes. The
// namespace is made by a child that never runs: it is traced, so it stops
// at its execve, and is killed once its namespace is open (runc 1.2 makes
// its idmapped mounts the same way).
func usernsFD(ids idShift) (*os.File, error) {
	m := []syscall.SysProcIDMap{{ContainerID: int(ids.From), HostID: int(ids.HostID), Size: int(ids.Size)}}
	// The tracer is this thread: it must start, kill and reap the child.
	goruntime.LockOSThread()
	defer goruntime.UnlockOSThread()
	proc, err := os.StartProcess("/proc/self/exe", []string{"cove-userns"}, &os.ProcAttr{
		Sys: &syscall.SysProcAttr{
			Cloneflags:  unix.CLONE_NEWUSER,
			UidMappings: m,
			GidMappings: m,
			Ptrace:      true,
			Pdeathsig:   syscall.SIGKILL,
		},
	})
	if err != nil {
		return nil, fmt.Errorf("make a user namespace for %d->%d+%d: %w", ids.From, ids.HostID, ids.Size, err)
	}
	defer func() {
		proc.Kill()
		proc.Wait()
	}()
	f, err := os.Open("/proc/" + strconv.Itoa(proc.Pid) + "/ns/user")
	if err != nil {
		return nil, fmt.Errorf("open the user namespace for %d->%d+%d: %w", ids.From, ids.HostID, ids.Size, err)
	}
	return f, nil
}

// usernsCacheSize bounds the user namespaces a Runtime keeps open.
const usernsCacheSize = 256

// usernsCache keeps the user namespaces made for ID ranges, so that a range
// used again (the range a terminate freed is the next one given; a sandbox
// wakes in its own) needs no new child: making one forks this whole
// process (Go forks, rather than vforks, into a new user namespace),
// about 10 ms of CPU and 20 ms or more of waiting.
// An open namespace grants nothing; at most usernsCacheSize are kept.
type usernsCache struct {
	mu sync.Mutex
	m  map[idShift]*os.File
}

// idShift maps the IDs From to From+Size-1 of a tree to HostID and on: an
// image's tree (From 0) or a layer written by another sandbox (From its
// range's first host ID).
type idShift struct{ From, HostID, Size uint32 }

// with calls fn with a descriptor of a user namespace mapping ids, holding
// the cache's lock (fn is short: one mount_setattr).
func (c *usernsCache) with(ids idShift, fn func(fd int) error) error {
	c.mu.Lock()
	f := c.m[ids]
	c.mu.Unlock()
	if f == nil {
		var err error
		if f, err = usernsFD(ids); err != nil {
			return err
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[idShift]*os.File{}
	}
	if old := c.m[ids]; old != nil && old != f {
		f.Close() // made at once by another start
		f = old
	}
	if c.m[ids] == nil {
		for k, v := range c.m {
			if len(c.m) < usernsCacheSize {
				break
			}
			v.Close()
			delete(c.m, k)
		}
		c.m[ids] = f
	}
	return fn(int(f.Fd()))
}

// mountIDMapped mounts a read-only, nosuid, nodev view of the tree src at
// target, its IDs mapped through ids: a file of uid 0 in src belongs to
// ids.HostID in the view.
func (r *Runtime) mountIDMapped(src, target string, ids image.IDMap) error {
	return r.mountShifted(src, target, idShift{From: 0, HostID: ids.HostID, Size: ids.Size})
}

// mountShifted mounts a read-only, nosuid, nodev view of the tree src at
// target, its IDs shifted by ids.
func (r *Runtime) mountShifted(src, target string, ids idShift) error {
	return r.mountView(src, target, ids, unix.MOUNT_ATTR_RDONLY)
}

// mountView mounts a nosuid, nodev view of the tree src (one mount, not
// the mounts under it) at target, its IDs shifted by ids, with the
// further mount attributes attr.
func (r *Runtime) mountView(src, target string, ids idShift, attr uint64) error {
	fd, err := unix.OpenTree(unix.AT_FDCWD, src, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return fmt.Errorf("open_tree %s: %w", src, err)
	}
	defer unix.Close(fd)
	err = r.userns.with(ids, func(ns int) error {
		a := &unix.MountAttr{
			Attr_set:  unix.MOUNT_ATTR_IDMAP | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV | attr,
			Userns_fd: uint64(ns),
		}
		return unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, a)
	})
	if err != nil {
		return fmt.Errorf("idmap %s from %d to %d+%d: %w", src, ids.From, ids.HostID, ids.Size, err)
	}
	if err := unix.MoveMount(fd, "", unix.AT_FDCWD, target, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("move_mount %s to %s: %w", src, target, err)
	}
	return nil
}
