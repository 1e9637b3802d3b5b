// Package image keeps the root filesystems that sandboxes start from: the
// managed Debian image built with debootstrap, and a tiny busybox image for
// tests.
//
// An image lives in a directory of its own under the images directory:
//
//	<imagesDir>/v2/<name>/image.json   what Load reads (written last)
//	<imagesDir>/v2/<name>/rootfs/      the tree, used read-only as overlay lower layer
//
// An image is built in a temporary directory beside its final place and
// renamed into place once complete, so an interrupted build never leaves a
// directory that Load accepts.
//
// A rootfs keeps its own IDs (root's files belong to uid 0 on disk): every
// sandbox has a host ID range of its own, and the runtime shows it the
// image through an idmapped mount of the tree. The v2 directory is 0700:
// the tree holds set-uid binaries owned by host root, which no host user
// may reach.
//
// Images of the first format (<imagesDir>/<name>/, their ownership shifted
// to the one range all sandboxes shared) are never read as images: Convert
// copies them into v2 with their IDs shifted back, and leaves the old
// directory alone for older servers that share the images directory.
package image

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/cove-dev/cove/internal/node"
)

// ManagedName is the name of the managed Debian image.
const ManagedName = node.ManagedTemplate

const (
	metaFile  = "image.json"
	rootfsDir = "rootfs"
	// formatDir holds the images of Format under the images dir.
	formatDir = "v2"
)

// Format is the on-disk format of images this package reads: trees with
// their own IDs, under <imagesDir>/v2. (Format 1, at <imagesDir>/<name>
// with no format in image.json, had its IDs shifted to 1000000.)
const Format = 2

// AgentMountPoint is where the runtime bind-mounts cove-agent. Every image
// has an empty file there, so the mount needs no change to the sandbox's
// upper layer.
const AgentMountPoint = "/.cove/cove-agent"

// ErrNotFound says an image is absent or incomplete.
var ErrNotFound = errors.New("image not found")

// Image is a root filesystem ready to be the lower layer of a sandbox.
type Image struct {
	Name   string `json:"name"`
	Dir    string `json:"-"` // <imagesDir>/v2/<name>
	Rootfs string `json:"-"` // <Dir>/rootfs
	// Shell is how a command string is run: the string is appended as the
	// last argument, e.g. ["/bin/bash", "-lc"].
	Shell []string `json:"shell"`
	// Format is the on-disk format, Format for every image Load returns.
	Format int `json:"format"`
	// Config is what an imported OCI image says of itself (internal/images
	// writes it); nil for the images cove builds. An imported image may
	// have no shell: then only argv runs in it.
	Config *Config `json:"config,omitempty"`
	// Recipe names what a built image was built from (ManagedRecipe for
	// the managed image); "" for images without one.
	Recipe string `json:"recipe,omitempty"`
}

// Config is an imported image's configuration, from its OCI config, with
// its user resolved against the image's own /etc/passwd.
type Config struct {
	// Digest is the image's manifest digest ("sha256:…"), which names its
	// directory: the same image is stored once.
	Digest     string            `json:"digest"`
	SizeBytes  int64             `json:"size_bytes"`
	Env        []string          `json:"env"`
	WorkingDir string            `json:"working_dir"`
	User       string            `json:"user"`
	Entrypoint []string          `json:"entrypoint"`
	Cmd        []string          `json:"cmd"`
	Labels     map[string]string `json:"labels"`
	// UID, GID and Home are the account User names: commands run as it
	// unless they ask for root.
	UID  int    `json:"uid"`
	GID  int    `json:"gid"`
	Home string `json:"home"`
}

// Imported reports whether the image came from an OCI artifact.
func (img Image) Imported() bool { return img.Config != nil }

// DirName is the directory (and node template) name of the imported image
// whose manifest digest is digest ("sha256:…"): "sha256-…".
func DirName(digest string) string { return strings.Replace(digest, ":", "-", 1) }

// IDMap is a user namespace mapping: container uid and gid 0 map to HostID
// on the host, for Size IDs. Each sandbox has its own.
type IDMap struct {
	HostID uint32 `json:"host_id"`
	Size   uint32 `json:"size"`
}

// LegacyIDMap is the range every sandbox shared before sandboxes had ranges
// of their own, and the one images of format 1 were shifted to. Sandboxes
// created then keep it, so that their saved files keep their owners.
var LegacyIDMap = IDMap{HostID: 1000000, Size: 65536}

// OrLegacy returns m, or LegacyIDMap when m is zero.
func (m IDMap) OrLegacy() IDMap {
	if m == (IDMap{}) {
		return LegacyIDMap
	}
	return m
}

// Validate checks that the range is usable: not touching host root, big
// enough for the IDs images use (1000 for user, 65534 for nobody), and not
// overflowing.
func (m IDMap) Validate() error {
	switch {
	case m.HostID == 0:
		return errors.New("id map: host id 0 would make sandbox root host root")
	case m.Size < 65536:
		return fmt.Errorf("id map: size %d is under 65536", m.Size)
	case uint64(m.HostID)+uint64(m.Size) > 1<<32-1:
		return fmt.Errorf("id map: %d+%d overflows", m.HostID, m.Size)
	}
	return nil
}

// Load reads the image called name under imagesDir.
func Load(imagesDir, name string) (Image, error) {
	if err := checkName(name); err != nil {
		return Image{}, err
	}
	dir := filepath.Join(imagesDir, formatDir, name)
	b, err := os.ReadFile(filepath.Join(dir, metaFile))
	if errors.Is(err, fs.ErrNotExist) {
		return Image{}, fmt.Errorf("load image %s from %s: %w", name, imagesDir, ErrNotFound)
	}
	if err != nil {
		return Image{}, fmt.Errorf("load image %s: %w", name, err)
	}
	var img Image
	if err := json.Unmarshal(b, &img); err != nil {
		return Image{}, fmt.Errorf("load image %s: parse %s: %w", name, metaFile, err)
	}
	if img.Format != Format {
		return Image{}, fmt.Errorf("load image %s: format %d in %s, want %d", name, img.Format, metaFile, Format)
	}
	if img.Name != name {
		return Image{}, fmt.Errorf("load image %s: %s names %q", name, metaFile, img.Name)
	}
	if len(img.Shell) == 0 && img.Config == nil {
		return Image{}, fmt.Errorf("load image %s: no shell in %s", name, metaFile)
	}
	img.Dir = dir
	img.Rootfs = filepath.Join(dir, rootfsDir)
	st, err := os.Stat(img.Rootfs)
	if errors.Is(err, fs.ErrNotExist) {
		return Image{}, fmt.Errorf("load image %s: no rootfs: %w", name, ErrNotFound)
	}
	if err != nil {
		return Image{}, fmt.Errorf("load image %s: %w", name, err)
	}
	if !st.IsDir() {
		return Image{}, fmt.Errorf("load image %s: rootfs is not a directory", name)
	}
	return img, nil
}

// Current reports whether the image called name under imagesDir exists
// and was built from recipe.
func Current(imagesDir, name, recipe string) bool {
	img, err := Load(imagesDir, name)
	return err == nil && img.Recipe == recipe
}

// List returns the complete images under imagesDir that cove built, sorted
// by name; temporary directories of builds, incomplete images and imported
// images (which belong to the teams that imported them, not to every
// team as templates) are left out.
func List(imagesDir string) ([]Image, error) {
	entries, err := os.ReadDir(filepath.Join(imagesDir, formatDir))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list images: %w", err)
	}
	var imgs []Image
	for _, e := range entries {
		if !e.IsDir() || checkName(e.Name()) != nil {
			continue
		}
		img, err := Load(imagesDir, e.Name())
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if img.Imported() {
			continue
		}
		imgs = append(imgs, img)
	}
	return imgs, nil
}

// ReadFile reads name, a path in the image's tree, whole; more than max
// bytes is an error. Symlinks resolve inside the tree and one that leads
// out of it is an error: an image never makes the host read a host file.
func (img Image) ReadFile(name string, max int64) ([]byte, error) {
	root, err := os.OpenRoot(img.Rootfs)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	f, err := root.Open(strings.TrimPrefix(path.Clean("/"+name), "/"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("image %s: %s is not a regular file", img.Name, name)
	}
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("image %s: %s is larger than %d bytes", img.Name, name, max)
	}
	return b, nil
}

// writeMeta writes dir/image.json for img.
func writeMeta(dir string, img Image) error {
	b, err := json.MarshalIndent(img, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, metaFile+".tmp")
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, metaFile))
}

func checkName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") || strings.HasPrefix(name, ".") {
		return fmt.Errorf("image name %q: not a plain name", name)
	}
	return nil
}
