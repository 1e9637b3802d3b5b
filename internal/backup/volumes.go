package backup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// Volumes are copied as their ext4 images, whole: the host never looks
// inside a volume (docs/architecture.md, "Team volumes on a node"), so a
// backup neither walks nor interprets what sandboxes left there, and the
// image keeps every owner, mode and link as the sandboxes made them.
//
// A volume's image is at <data-dir>/volumes/<id>/disk.img and goes into
// the backup as volume-<id>.img, a sparse copy. While a mounted volume is
// copied its filesystem is frozen (FIFREEZE): writes to it wait until the
// copy is done, and the copy is the filesystem as of that instant, clean.

// volumeFilePrefix and volumeFileSuffix make a volume's file name in a
// backup.
const (
	volumeFilePrefix = "volume-"
	volumeFileSuffix = ".img"
)

// volumeIDPattern is what a volume's ID may be (the node's IDs).
var volumeIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$`)

// copyChunk is how much copySparse copies between looks at its context.
const copyChunk = 8 << 20

func volumeFile(id string) string { return volumeFilePrefix + id + volumeFileSuffix }

// volumeOfFile returns the volume a backup's file is the image of.
func volumeOfFile(name string) (string, bool) {
	if !strings.HasPrefix(name, volumeFilePrefix) || !strings.HasSuffix(name, volumeFileSuffix) {
		return "", false
	}
	id := strings.TrimSuffix(strings.TrimPrefix(name, volumeFilePrefix), volumeFileSuffix)
	return id, volumeIDPattern.MatchString(id)
}

// volumeImage is where a data dir keeps volume id's image.
func volumeImage(dataDir, id string) string {
	return filepath.Join(dataDir, "volumes", id, "disk.img")
}

// backupVolumes copies the image of every volume of the copied database
// that is on this host into dir. A volume whose image is not here (it
// lives on another node, or was deleted after the database was copied)
// is named in m.VolumesNotCopied.
func backupVolumes(ctx context.Context, dataDir, dir string, ids []string, m *Manifest) error {
	m.Volumes = []string{}
	for _, id := range ids {
		if err := ctx.Err(); err != nil {
			return err
		}
		if !volumeIDPattern.MatchString(id) {
			return fmt.Errorf("volume %q: not a volume ID", id)
		}
		img := volumeImage(dataDir, id)
		if _, err := os.Stat(img); errors.Is(err, os.ErrNotExist) {
			m.VolumesNotCopied = append(m.VolumesNotCopied, id)
			continue
		}
		err := withFrozen(filepath.Join(filepath.Dir(img), "mnt"), func() error {
			return copySparse(ctx, img, filepath.Join(dir, volumeFile(id)), 0o600)
		})
		if errors.Is(err, os.ErrNotExist) { // deleted meanwhile
			m.VolumesNotCopied = append(m.VolumesNotCopied, id)
			continue
		}
		if err != nil {
			return fmt.Errorf("volume %s: %w", id, err)
		}
		m.Volumes = append(m.Volumes, id)
	}
	return nil
}

// restoreVolumes puts every volume image of the backup at dir into
// dataDir/volumes, where the restored serve mounts it.
func restoreVolumes(ctx context.Context, dir, dataDir string, m Manifest) error {
	if len(m.Volumes) == 0 {
		return nil
	}
	root := filepath.Join(dataDir, "volumes")
	if err := os.Mkdir(root, 0o700); err != nil {
		return err
	}
	for _, id := range m.Volumes {
		if err := ctx.Err(); err != nil {
			return err
		}
		if !volumeIDPattern.MatchString(id) {
			return fmt.Errorf("the manifest names volume %q, not a volume ID", id)
		}
		vdir := filepath.Join(root, id)
		if err := os.Mkdir(vdir, 0o700); err != nil {
			return err
		}
		if err := copySparse(ctx, filepath.Join(dir, volumeFile(id)), filepath.Join(vdir, "disk.img"), 0o600); err != nil {
			return fmt.Errorf("volume %s: %w", id, err)
		}
	}
	return nil
}

// copySparse copies the file from into a new file to of the given mode,
// leaving its holes holes: only the ranges the file system says hold
// data are read and written. It stops between chunks once ctx is done
// (an interrupted backup thaws its volume at once).
func copySparse(ctx context.Context, from, to string, mode os.FileMode) (err error) {
	src, err := os.Open(from)
	if err != nil {
		return err
	}
	defer src.Close()
	fi, err := src.Stat()
	if err != nil {
		return err
	}
	dst, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := dst.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			os.Remove(to)
		}
	}()
	size := fi.Size()
	for off := int64(0); off < size; {
		start, end, err := dataRange(src, off, size)
		if err != nil {
			return err
		}
		if start >= size {
			break
		}
		if _, err := dst.Seek(start, io.SeekStart); err != nil {
			return err
		}
		for at := start; at < end; {
			if err := ctx.Err(); err != nil {
				return err
			}
			n := min(end-at, copyChunk)
			if _, err := io.Copy(dst, io.NewSectionReader(src, at, n)); err != nil {
				return err
			}
			at += n
		}
		off = end
	}
	if err := dst.Truncate(size); err != nil {
		return err
	}
	return dst.Sync()
}
