package runtime

import (
	"fmt"
	"os"
	goruntime "runtime"
	"strconv"
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
func usernsFD(ids image.IDMap) (*os.File, error) {
	m := []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(ids.HostID), Size: int(ids.Size)}}
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
		return nil, fmt.Errorf("make a user namespace for %d+%d: %w", ids.HostID, ids.Size, err)
	}
	defer func() {
		proc.Kill()
		proc.Wait()
	}()
	f, err := os.Open("/proc/" + strconv.Itoa(proc.Pid) + "/ns/user")
	if err != nil {
		return nil, fmt.Errorf("open the user namespace for %d+%d: %w", ids.HostID, ids.Size, err)
	}
	return f, nil
}

// mountIDMapped mounts a read-only, nosuid, nodev view of the tree src at
// target, its IDs mapped through ids: a file of uid 0 in src belongs to
// ids.HostID in the view.
func mountIDMapped(src, target string, ids image.IDMap) error {
	ns, err := usernsFD(ids)
	if err != nil {
		return err
	}
	defer ns.Close()
	fd, err := unix.OpenTree(unix.AT_FDCWD, src, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return fmt.Errorf("open_tree %s: %w", src, err)
	}
	defer unix.Close(fd)
	attr := &unix.MountAttr{
		Attr_set:  unix.MOUNT_ATTR_IDMAP | unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV,
		Userns_fd: uint64(ns.Fd()),
	}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, attr); err != nil {
		return fmt.Errorf("idmap %s to %d+%d: %w", src, ids.HostID, ids.Size, err)
	}
	if err := unix.MoveMount(fd, "", unix.AT_FDCWD, target, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("move_mount %s to %s: %w", src, target, err)
	}
	return nil
}
