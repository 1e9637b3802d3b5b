package image

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// Unshift moves the ownership of every entry under root (root included)
// from the host IDs of ids back to the image's own: (uid, gid) becomes
// (uid-HostID, gid-HostID). It undoes the shift of format 1 images. Entries
// already below the range are left alone, so Unshift can be run again
// after an interruption, and hard links are changed once; an ID above the
// range is an error.
//
// chown clears the setuid and setgid bits and file capabilities; Unshift
// puts the bits back and rewrites capabilities as version 2 (no rootid):
// seen through a sandbox's idmapped mount they belong to its root.
func Unshift(ctx context.Context, root string, ids IDMap) error {
	if err := ids.Validate(); err != nil {
		return err
	}
	n := 0
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if n++; n%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if err := unshiftOne(path, info, ids); err != nil {
			return fmt.Errorf("unshift %s: %w", path, err)
		}
		return nil
	})
}

func unshiftID(id uint32, ids IDMap) (uint32, bool, error) {
	switch {
	case id < ids.Size && id < ids.HostID:
		return id, false, nil // done already
	case id >= ids.HostID && id-ids.HostID < ids.Size:
		return id - ids.HostID, true, nil
	}
	return 0, false, fmt.Errorf("id %d is outside the shifted range %d+%d", id, ids.HostID, ids.Size)
}

func unshiftOne(path string, info fs.FileInfo, ids IDMap) error {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return errors.New("no stat_t")
	}
	uid, cu, err := unshiftID(st.Uid, ids)
	if err != nil {
		return err
	}
	gid, cg, err := unshiftID(st.Gid, ids)
	if err != nil {
		return err
	}
	if !cu && !cg {
		return nil
	}
	isLink := info.Mode()&fs.ModeSymlink != 0
	var caps []byte
	if info.Mode().IsRegular() {
		caps = getCaps(path)
	}
	if err := os.Lchown(path, int(uid), int(gid)); err != nil {
		return err
	}
	if !isLink && info.Mode()&(fs.ModeSetuid|fs.ModeSetgid) != 0 {
		// The kernel cleared them; the raw mode restores them exactly.
		if err := unix.Chmod(path, st.Mode&0o7777); err != nil {
			return fmt.Errorf("restore mode: %w", err)
		}
	}
	if caps != nil {
		if err := unix.Setxattr(path, capXattr, capsV2(caps), 0); err != nil {
			return fmt.Errorf("restore file capabilities: %w", err)
		}
	}
	return nil
}

const (
	capXattr    = "security.capability"
	capRevMask  = 0xFF000000
	capRev2     = 0x02000000
	capV2Length = 20
	capV3Length = 24
)

// getCaps returns the file capabilities of path, or nil.
func getCaps(path string) []byte {
	buf := make([]byte, capV3Length)
	n, err := unix.Lgetxattr(path, capXattr, buf)
	if err != nil || n < capV2Length {
		return nil
	}
	return buf[:n]
}

// capsV2 rewrites v2 or v3 capabilities as v2 (no rootid).
func capsV2(caps []byte) []byte {
	out := make([]byte, capV2Length)
	copy(out, caps[:capV2Length])
	magic := binary.LittleEndian.Uint32(out[0:4])
	magic = magic&^capRevMask | capRev2
	binary.LittleEndian.PutUint32(out[0:4], magic)
	return out
}

// Reown moves the ownership of every entry under root (root included)
// whose uid or gid lies in from's host range to the same place in to's:
// a disk written by one sandbox, handed to another with its own range.
// Entries outside from's range are left alone, so Reown can be run again
// after an interruption. Set-id bits are put back after chown clears them,
// and file capabilities keep their meaning: a v3 capability whose root is
// from's root gets to's.
func Reown(ctx context.Context, root string, from, to IDMap) error {
	if err := from.Validate(); err != nil {
		return err
	}
	if err := to.Validate(); err != nil {
		return err
	}
	move := func(id uint32) (uint32, bool) {
		if id >= from.HostID && id-from.HostID < from.Size && id-from.HostID < to.Size {
			return id - from.HostID + to.HostID, true
		}
		return id, false
	}
	n := 0
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if n++; n%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		st, ok := info.Sys().(*syscall.Stat_t)
		if !ok {
			return errors.New("no stat_t")
		}
		uid, cu := move(st.Uid)
		gid, cg := move(st.Gid)
		if !cu && !cg {
			return nil
		}
		var caps []byte
		if info.Mode().IsRegular() {
			caps = getCaps(path)
		}
		if err := os.Lchown(path, int(uid), int(gid)); err != nil {
			return fmt.Errorf("reown %s: %w", path, err)
		}
		if info.Mode()&fs.ModeSymlink == 0 && info.Mode()&(fs.ModeSetuid|fs.ModeSetgid) != 0 {
			if err := unix.Chmod(path, st.Mode&0o7777); err != nil {
				return fmt.Errorf("reown %s: restore mode: %w", path, err)
			}
		}
		if caps != nil {
			if len(caps) >= capV3Length {
				if r, ok := move(binary.LittleEndian.Uint32(caps[capV2Length:])); ok {
					binary.LittleEndian.PutUint32(caps[capV2Length:], r)
				}
			}
			if err := unix.Setxattr(path, capXattr, caps, 0); err != nil {
				return fmt.Errorf("reown %s: restore file capabilities: %w", path, err)
			}
		}
		return nil
	})
}
