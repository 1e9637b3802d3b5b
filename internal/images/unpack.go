package images

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/expansion"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// Policy is what an unpacked image may hold.
type Policy struct {
	// AllowedSetID are the paths (absolute, in the image) of regular files
	// that may keep a set-user-ID or set-group-ID bit; any other such file
	// refuses the image. Nil is DefaultAllowedSetID.
	AllowedSetID []string
	// MaxBytes bounds the bytes of the unpacked files together; 0 sets no
	// bound.
	MaxBytes int64
	// MaxID bounds the uids and gids of the files (exclusive): the files
	// of a sandbox's image are seen through its ID range, 65536 IDs.
	// 0 is 65536.
	MaxID int
}

// DefaultAllowedSetID are the set-ID programs of common distributions that
// an image may keep (they act inside the sandbox's user namespace only).
var DefaultAllowedSetID = []string{
	"/bin/su", "/usr/bin/su", "/bin/mount", "/usr/bin/mount", "/bin/umount", "/usr/bin/umount",
	"/usr/bin/passwd", "/usr/bin/chsh", "/usr/bin/chfn", "/usr/bin/newgrp", "/usr/bin/gpasswd",
	"/usr/bin/chage", "/usr/bin/expiry", "/usr/bin/sudo", "/usr/bin/wall", "/usr/bin/ssh-agent",
	"/usr/bin/crontab", "/sbin/unix_chkpwd", "/usr/sbin/unix_chkpwd", "/bin/ping", "/usr/bin/ping",
	"/usr/lib/openssh/ssh-keysign", "/usr/lib/dbus-1.0/dbus-daemon-launch-helper",
}

const (
	whiteoutPrefix = ".wh."
	opaqueMarker   = ".wh..wh..opq"
)

// Unpack verifies the image's config and layers against its manifest
// (the config's digest, each layer's digest in an OCI layout, each
// layer's diff ID in the config) and applies the layers in order to
// rootfs, an empty directory. It returns the bytes of the files written.
// An image that breaks p, or whose bytes do not match, is refused with
// invalid_argument (payload_too_large past p.MaxBytes); rootfs then holds
// a partial tree that the caller removes.
func Unpack(ctx context.Context, a Archive, rootfs string, p Policy) (int64, error) {
	if p.AllowedSetID == nil {
		p.AllowedSetID = DefaultAllowedSetID
	}
	if p.MaxID == 0 {
		p.MaxID = 65536
	}
	m, err := a.Image.Manifest()
	if err != nil {
		return 0, refuse("read the manifest: %v", err)
	}
	raw, err := a.Image.RawConfigFile()
	if err != nil {
		return 0, refuse("read the config: %v", err)
	}
	if a.Format == FormatOCI {
		if got := sha256Hash(raw); got != m.Config.Digest {
			return 0, refuse("the config's digest is %s; the manifest says %s", got, m.Config.Digest)
		}
	}
	cf, err := a.Image.ConfigFile()
	if err != nil {
		return 0, refuse("read the config: %v", err)
	}
	layers, err := a.Image.Layers()
	if err != nil {
		return 0, refuse("read the layers: %v", err)
	}
	if len(layers) != len(cf.RootFS.DiffIDs) || len(layers) != len(m.Layers) {
		return 0, refuse("the manifest has %d layers and the config %d diff IDs", len(m.Layers), len(cf.RootFS.DiffIDs))
	}
	root, err := os.OpenRoot(rootfs)
	if err != nil {
		return 0, err
	}
	defer root.Close()
	u := &unpacker{root: root, policy: p}
	for i, l := range layers {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		if err := u.layer(a, l, m.Layers[i], cf.RootFS.DiffIDs[i]); err != nil {
			return 0, fmt.Errorf("layer %d of %d: %w", i+1, len(layers), err)
		}
	}
	return u.bytes, nil
}

type unpacker struct {
	root   *os.Root
	policy Policy
	bytes  int64
	// expanded counts the layers' bytes as they come out of their
	// compression, all layers together, against the archive's size.
	expanded *expansion.Reader
	source   io.Reader // the layer expanded reads now
}

// Read reads the current layer for expanded.
func (u *unpacker) Read(p []byte) (int, error) { return u.source.Read(p) }

// bound returns r counted against the archive's expansion bound.
func (u *unpacker) bound(a Archive, r io.Reader) io.Reader {
	if a.Size <= 0 {
		return r
	}
	if u.expanded == nil {
		u.expanded = expansion.NewReader(u, func() int64 { return a.Size }, "the image's layers")
	}
	u.source = r
	return u.expanded
}

// bomb is the expansion bound's error, if it was hit: the tar reader
// and apply turn read errors into their own.
func (u *unpacker) bomb() error {
	if u.expanded != nil {
		return u.expanded.Err()
	}
	return nil
}

// layer verifies and applies one layer. An OCI layout's blob is read as
// stored and checked against the manifest's digest; a docker-save layer
// is read as go-containerregistry gives it uncompressed. Both are checked
// against the config's diff ID. The layer's tar is applied while it is
// read; a mismatch found at its end refuses the image (rootfs is thrown
// away).
func (u *unpacker) layer(a Archive, l v1.Layer, d v1.Descriptor, diffID v1.Hash) error {
	var rc io.ReadCloser
	var err error
	if a.Format == FormatOCI {
		rc, err = l.Compressed()
	} else {
		rc, err = l.Uncompressed()
	}
	if err != nil {
		return refuse("open layer %s: %v", d.Digest, err)
	}
	defer rc.Close()
	var stored hash.Hash
	var r io.Reader = rc
	if a.Format == FormatOCI {
		stored = sha256.New()
		br := bufio.NewReader(io.TeeReader(rc, stored))
		magic, _ := br.Peek(4)
		switch {
		case len(magic) >= 2 && magic[0] == 0x1f && magic[1] == 0x8b:
			zr, err := gzip.NewReader(br)
			if err != nil {
				return refuse("layer %s: %v", d.Digest, err)
			}
			zr.Multistream(true)
			r = zr
		case len(magic) == 4 && magic[0] == 0x28 && magic[1] == 0xb5 && magic[2] == 0x2f && magic[3] == 0xfd:
			return refuse("layer %s is zstd-compressed; export the image with gzip layers", d.Digest)
		default:
			r = br
		}
	}
	plain := sha256.New()
	tee := io.TeeReader(u.bound(a, r), plain)
	if err := u.apply(tee); err != nil {
		if berr := u.bomb(); berr != nil {
			return berr
		}
		return err
	}
	// The tar's end may leave padding unread: the digests cover it all.
	if _, err := io.Copy(io.Discard, tee); err != nil {
		if berr := u.bomb(); berr != nil {
			return berr
		}
		return refuse("read layer %s: %v", d.Digest, err)
	}
	if stored != nil {
		if _, err := io.Copy(io.Discard, io.TeeReader(rc, stored)); err != nil {
			return refuse("read layer %s: %v", d.Digest, err)
		}
		if got := hashOf(stored); got != d.Digest {
			return refuse("layer digest mismatch: the manifest says %s, the bytes are %s", d.Digest, got)
		}
	}
	if got := hashOf(plain); got != diffID {
		return refuse("layer diff ID mismatch: the config says %s, the bytes are %s", diffID, got)
	}
	return nil
}

// apply writes one layer's tar into the tree.
func (u *unpacker) apply(r io.Reader) error {
	tr := tar.NewReader(r)
	written := map[string]bool{}
	var opaque []string
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return refuse("the layer is not a valid tar: %v", err)
		}
		name, err := clean(h.Name)
		if err != nil {
			return err
		}
		if name == "" {
			continue // the root itself keeps its own mode
		}
		dir, base := path.Split(name)
		dir = strings.TrimSuffix(dir, "/")
		if dir == "" {
			dir = "."
		}
		switch {
		case base == opaqueMarker:
			opaque = append(opaque, dir)
			continue
		case strings.HasPrefix(base, whiteoutPrefix):
			target := path.Join(dir, strings.TrimPrefix(base, whiteoutPrefix))
			if err := u.root.RemoveAll(target); err != nil {
				return u.fail("whiteout "+target, err)
			}
			continue
		}
		if err := u.entry(tr, h, name, dir); err != nil {
			return err
		}
		for p := name; p != "." && p != "/"; p = path.Dir(p) {
			written[p] = true
		}
	}
	// An opaque directory hides what lower layers put in it: everything
	// in it that this layer did not write goes.
	for _, d := range opaque {
		if err := u.prune(d, written); err != nil {
			return err
		}
	}
	return nil
}

// clean makes an entry's name relative to the root, refusing one that
// leaves it.
func clean(name string) (string, error) {
	n := strings.TrimLeft(strings.TrimPrefix(name, "./"), "/")
	n = strings.TrimSuffix(n, "/")
	if n == "" || n == "." {
		return "", nil
	}
	if !filepath.IsLocal(n) || strings.ContainsRune(n, 0) {
		return "", refuse("entry %q leaves the image's root", name)
	}
	return path.Clean(n), nil
}

func (u *unpacker) entry(tr *tar.Reader, h *tar.Header, name, dir string) error {
	switch h.Typeflag {
	case tar.TypeChar, tar.TypeBlock:
		return refuse("%s is a device node; images may not hold device nodes", "/"+name)
	case tar.TypeFifo:
		return refuse("%s is a named pipe; images may not hold them", "/"+name)
	case tar.TypeReg, tar.TypeRegA, tar.TypeDir, tar.TypeSymlink, tar.TypeLink:
	case tar.TypeXGlobalHeader:
		return nil
	default:
		return refuse("%s has tar type %q, which images may not hold", "/"+name, h.Typeflag)
	}
	if h.Uid < 0 || h.Gid < 0 || h.Uid >= u.policy.MaxID || h.Gid >= u.policy.MaxID {
		return refuse("%s belongs to %d:%d; IDs must be under %d", "/"+name, h.Uid, h.Gid, u.policy.MaxID)
	}
	mode := fs.FileMode(h.Mode).Perm()
	if h.Mode&0o4000 != 0 {
		mode |= fs.ModeSetuid
	}
	if h.Mode&0o2000 != 0 {
		mode |= fs.ModeSetgid
	}
	if h.Mode&0o1000 != 0 {
		mode |= fs.ModeSticky
	}
	isReg := h.Typeflag == tar.TypeReg || h.Typeflag == tar.TypeRegA
	if isReg && (mode&fs.ModeSetuid != 0 || mode&fs.ModeSetgid != 0) && !slices.Contains(u.policy.AllowedSetID, "/"+name) {
		return refuse("%s is set-user-ID or set-group-ID and is not on the allowed list", "/"+name)
	}
	if h.Typeflag == tar.TypeDir && mode&fs.ModeSetuid != 0 {
		mode &^= fs.ModeSetuid // meaningless on a directory
	}
	if dir != "." {
		if err := u.root.MkdirAll(dir, 0o755); err != nil {
			return u.fail("make "+dir, err)
		}
	}
	// What a lower layer (or this one) left at name is replaced, except a
	// directory by a directory, whose contents stay.
	if fi, err := u.root.Lstat(name); err == nil {
		if !(fi.IsDir() && h.Typeflag == tar.TypeDir) {
			if err := u.root.RemoveAll(name); err != nil {
				return u.fail("replace "+name, err)
			}
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return u.fail("look at "+name, err)
	}
	switch {
	case h.Typeflag == tar.TypeDir:
		if err := u.root.Mkdir(name, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return u.fail("make "+name, err)
		}
	case isReg:
		if u.policy.MaxBytes > 0 && u.bytes+h.Size > u.policy.MaxBytes {
			return &api.Error{Code: api.CodePayloadTooLarge,
				Message: fmt.Sprintf("the image was refused: its files take more than %d bytes", u.policy.MaxBytes)}
		}
		f, err := u.root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
		if err != nil {
			return u.fail("create "+name, err)
		}
		n, err := io.Copy(f, io.LimitReader(tr, h.Size))
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return u.fail("write "+name, err)
		}
		if n != h.Size {
			return refuse("%s ends early", "/"+name)
		}
		u.bytes += n
	case h.Typeflag == tar.TypeSymlink:
		// The target is only text: every later path through it resolves
		// inside the root (os.Root), and in the sandbox it resolves
		// inside the sandbox.
		if err := u.root.Symlink(h.Linkname, name); err != nil {
			return u.fail("link "+name, err)
		}
	case h.Typeflag == tar.TypeLink:
		target, err := clean(h.Linkname)
		if err != nil || target == "" {
			return refuse("hard link %s to %q leaves the image's root", "/"+name, h.Linkname)
		}
		if err := u.root.Link(target, name); err != nil {
			return u.fail("link "+name+" to "+target, err)
		}
		return nil // the target's owner and mode stand
	}
	if err := u.root.Lchown(name, h.Uid, h.Gid); err != nil {
		return u.fail("chown "+name, err)
	}
	if h.Typeflag == tar.TypeSymlink {
		return nil
	}
	// After the chown, which clears set-ID bits.
	if err := u.root.Chmod(name, mode); err != nil {
		return u.fail("chmod "+name, err)
	}
	mtime := h.ModTime
	if mtime.IsZero() {
		mtime = time.Unix(0, 0)
	}
	if err := u.root.Chtimes(name, mtime, mtime); err != nil {
		return u.fail("set the times of "+name, err)
	}
	return nil
}

// prune removes what is in dir and not in written, recursing into what
// was written.
func (u *unpacker) prune(dir string, written map[string]bool) error {
	f, err := u.root.Open(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return u.fail("open "+dir, err)
	}
	st, err := f.Stat()
	if err != nil || !st.IsDir() {
		f.Close()
		return u.fail("open "+dir, err)
	}
	entries, err := f.ReadDir(-1)
	f.Close()
	if err != nil {
		return u.fail("read "+dir, err)
	}
	for _, e := range entries {
		p := path.Join(dir, e.Name())
		switch {
		case !written[p]:
			if err := u.root.RemoveAll(p); err != nil {
				return u.fail("remove "+p, err)
			}
		case e.IsDir():
			if err := u.prune(p, written); err != nil {
				return err
			}
		}
	}
	return nil
}

// fail turns a filesystem error while unpacking into the image's refusal:
// a path that escapes the root is the image's fault; a full disk is not.
func (u *unpacker) fail(what string, err error) error {
	if err == nil {
		err = errors.New("not a directory")
	}
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return &api.Error{Code: api.CodeInsufficientStorage, Message: "the images directory is full; the image could not be stored"}
	}
	return refuse("%s: %v", what, err)
}

func sha256Hash(b []byte) v1.Hash {
	sum := sha256.Sum256(b)
	return v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(sum[:])}
}

func hashOf(h hash.Hash) v1.Hash {
	return v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(h.Sum(nil))}
}
