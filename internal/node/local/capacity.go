package local

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/node"
)

// A sandbox's disk is a sparse file on the data dir's filesystem: it takes
// space as the sandbox writes, up to its disk_mib. The node admits a new
// disk only when the filesystem can still hold every disk it has promised
// plus the new one, so that a full data disk never turns another tenant's
// acknowledged writes into I/O errors.

// Admit refuses a sandbox whose disk the node cannot hold, with
// resource_exhausted saying what is free and what is promised.
func (n *Node) Admit(ctx context.Context, spec node.SandboxSpec) error {
	n.capMu.Lock()
	defer n.capMu.Unlock()
	return n.admitLocked(spec.ID, spec.Resources.DiskMiB<<20)
}

// reserve admits a disk for a start or a wake and counts it as promised
// until release, so that starts running at once cannot together promise
// more than there is.
func (n *Node) reserve(id string, bytes int64) (release func(), err error) {
	n.capMu.Lock()
	defer n.capMu.Unlock()
	if err := n.admitLocked(id, bytes); err != nil {
		return nil, err
	}
	n.pending[id] = bytes
	return func() {
		n.capMu.Lock()
		delete(n.pending, id)
		n.capMu.Unlock()
	}, nil
}

func (n *Node) admitLocked(id string, bytes int64) error {
	free, promised, room, on := n.roomLocked(id)
	if on && promised+bytes > room {
		return api.Errorf(api.CodeResourceExhausted,
			"this node cannot hold another %d MiB disk: %d MiB free on its data disk, %d MiB of it promised to sandboxes and %d MiB kept for output and state; ask for a smaller disk_mib or try again when sandboxes end",
			bytes>>20, free>>20, promised>>20, n.cfg.DiskReserveBytes>>20)
	}
	return nil
}

// roomLocked is the data disk's free space, what is promised of it but
// to id, and the room for promises; on is false when admission is off or
// the disk cannot be read (the start itself reports a missing data dir).
func (n *Node) roomLocked(id string) (free, promised, room int64, on bool) {
	if n.cfg.DiskOvercommit <= 0 {
		return 0, 0, 0, false
	}
	var st unix.Statfs_t
	if err := unix.Statfs(n.rt.StateDir(""), &st); err != nil {
		return 0, 0, 0, false
	}
	free = int64(st.Bavail) * st.Bsize
	promised = n.promisedLocked(id)
	room = int64(float64(free-n.cfg.DiskReserveBytes) * n.cfg.DiskOvercommit)
	return free, promised, room, true
}

// promisedLocked is how much the sandboxes' disks may still grow: each
// disk's size less what it already takes, and the disks being made now.
// except is left out (a sandbox asking again).
func (n *Node) promisedLocked(except string) int64 {
	var total int64
	for id, b := range n.pending {
		if id != except {
			total += b
		}
	}
	entries, err := os.ReadDir(n.rt.StateDir(""))
	if err != nil {
		return total
	}
	for _, e := range entries {
		if !e.IsDir() || e.Name() == except || n.pending[e.Name()] > 0 {
			continue
		}
		total += growth(filepath.Join(n.rt.StateDir(e.Name()), "disk.img"))
	}
	// Volumes are sparse disks too, promised up to their size.
	for _, img := range n.rt.VolumeImages() {
		total += growth(img)
	}
	return total
}

// growth is what a sparse file may still take: its size less its blocks.
func growth(path string) int64 {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0 // no disk (yet, or any more): nothing to grow
	}
	return max(st.Size-st.Blocks*512, 0)
}

// HoldDisk counts bytes of the data disk for key, something other than
// a sandbox's disk that is about to be written there (an upload that has
// not arrived yet), as promised: sandboxes are admitted only beside it.
// A hold that grows is admitted like a disk; one that shrinks (its bytes
// landed, and now count in the free space) always succeeds; 0 forgets it.
func (n *Node) HoldDisk(key string, bytes int64) error {
	key = holdPrefix + key
	n.capMu.Lock()
	defer n.capMu.Unlock()
	if bytes <= 0 {
		delete(n.pending, key)
		return nil
	}
	if bytes > n.pending[key] {
		// Uploads are real bytes soon: never overcommitted.
		free, promised, _, on := n.roomLocked(key)
		if on && promised+bytes > free-n.cfg.DiskReserveBytes {
			return api.Errorf(api.CodeResourceExhausted,
				"this node's data disk has no room for the upload: %d MiB free, %d MiB of it promised to sandboxes and other uploads and %d MiB kept for output and state; nothing was kept, try again when uploads or sandboxes end",
				free>>20, promised>>20, n.cfg.DiskReserveBytes>>20)
		}
	}
	n.pending[key] = bytes
	return nil
}

// holdPrefix keeps holds apart from sandbox IDs in pending.
const holdPrefix = "hold:"

// noRoom codes a write that found the node's data disk full, naming the
// disk and saying what was not done: ENOSPC from the node's own files (a
// command's output log), and the agent's insufficient_storage while the
// data disk is below its reserve (the readiness check's "disk" fails
// then). A sandbox's disk is a sparse file on the data disk, so its
// writes fail once the data disk has no room, however empty the sandbox's
// own disk is; with room on the data disk, the agent's answer (the
// sandbox's own disk is full) stands. Anything else is returned as it is.
func (n *Node) noRoom(err error, what string) error {
	if err == nil {
		return nil
	}
	var e *api.Error
	switch coded := errors.As(err, &e); {
	case !coded && errors.Is(err, syscall.ENOSPC):
	case coded && e.Code == api.CodeInsufficientStorage && n.dataDiskLow():
	default:
		return err
	}
	n.log.Warn("the data disk is full", "dir", n.cfg.DataDir, "err", err)
	return api.Errorf(api.CodeInsufficientStorage, "the node's data disk (%s) is full: %s; retry once space is freed", n.cfg.DataDir, what)
}

// roomToWrite refuses a file call that writes into a sandbox while the
// data disk is below its reserve, before it reaches the agent. The
// sandbox's disk is a sparse file there: a write whose blocks the data
// disk cannot back fails under the sandbox's ext4, whose journal may then
// abort and leave the sandbox's disk read-only until it sleeps and wakes.
// A call refused here has touched nothing.
func (n *Node) roomToWrite() error {
	if !n.dataDiskLow() {
		return nil
	}
	return n.noRoom(syscall.ENOSPC, nothingWritten)
}

// dataDiskLow reports whether the data disk has less free than its
// reserve (at least 1 MiB).
func (n *Node) dataDiskLow() bool {
	var st unix.Statfs_t
	if err := unix.Statfs(n.rt.StateDir(""), &st); err != nil {
		return false
	}
	return int64(st.Bavail)*st.Bsize < max(n.cfg.DiskReserveBytes, 1<<20)
}
