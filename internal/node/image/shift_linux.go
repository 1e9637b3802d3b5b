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

// Shift moves the ownership of every entry under root (root included) from
// container IDs to host IDs: (uid, gid) becomes (uid+HostID, gid+HostID).
// Entries already inside the host range are left alone, so Shift can be run
// again after an interruption, and hard links are shifted once.
//
// chown clears the setuid and setgid bits and file capabilities; Shift puts
// the bits back and rewrites capabilities as version 3 with the rootid of
// the mapped root, so they keep working inside the user namespace.
func Shift(ctx context.Context, root string, ids IDMap) error {
	ids = ids.OrDefault()
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
		if err := shiftOne(path, info, ids); err != nil {
			return fmt.Errorf("shift %s: %w", path, err)
		}
		return nil
	})
}

func inRange(id uint32, ids IDMap) bool {
	return id >= ids.HostID && id-ids.HostID < ids.Size
}

func shiftOne(path string, info fs.FileInfo, ids IDMap) error {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return errors.New("no stat_t")
	}
	uid, gid := st.Uid, st.Gid
	if inRange(uid, ids) && inRange(gid, ids) {
		return nil
	}
	if !inRange(uid, ids) {
		if uid >= ids.Size {
			return fmt.Errorf("uid %d outside the mapped range of %d", uid, ids.Size)
		}
		uid += ids.HostID
	}
	if !inRange(gid, ids) {
		if gid >= ids.Size {
			return fmt.Errorf("gid %d outside the mapped range of %d", gid, ids.Size)
		}
		gid += ids.HostID
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
		if err := unix.Setxattr(path, capXattr, capsV3(caps, ids.HostID), 0); err != nil {
			return fmt.Errorf("restore file capabilities: %w", err)
		}
	}
	return nil
}

const (
	capXattr    = "security.capability"
	capRevMask  = 0xFF000000
	capRev3     = 0x03000000
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

// capsV3 rewrites v2 or v3 capabilities as v3 owned by rootid.
func capsV3(caps []byte, rootid uint32) []byte {
	out := make([]byte, capV3Length)
	copy(out, caps[:capV2Length])
	magic := binary.LittleEndian.Uint32(out[0:4])
	magic = magic&^capRevMask | capRev3
	binary.LittleEndian.PutUint32(out[0:4], magic)
	binary.LittleEndian.PutUint32(out[20:24], rootid)
	return out
}
