// Package images imports container images from standard OCI artifacts: an
// OCI image layout archive or a `docker save` archive, read with
// go-containerregistry. It verifies every layer against the manifest and
// the config, unpacks the layers in order into a root filesystem (whiteouts
// and opaque directories honoured; device nodes, set-ID files not on the
// allowed list, IDs beyond a sandbox's range and paths that leave the root
// refused), and records what the image's OCI config says of itself.
//
// Everything here reads bytes a user uploaded: nothing is trusted, every
// path is resolved inside the image's root (os.Root), and an image that
// breaks a rule is refused whole with invalid_argument.
package images

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"regexp"
	"strings"

	"github.com/cove-dev/cove/api"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Archive formats.
const (
	FormatDocker = "docker-save"
	FormatOCI    = "oci-layout"
)

// maxArchiveEntries bounds the entries of the outer archive (a docker-save
// or OCI layout tar holds a few files per layer).
const maxArchiveEntries = 10000

// Archive is an image read from an archive on disk.
type Archive struct {
	Image  v1.Image
	Format string
	// Digest is the manifest's digest, which names the stored image.
	Digest v1.Hash
	// Size is the archive's size in bytes: its layers together may
	// expand at most expansion.Ratio times it (past expansion.Floor).
	// 0 is unknown and sets no bound.
	Size int64
}

// refuse is the error of an archive or layer that is not a usable image.
func refuse(format string, args ...any) error {
	return &api.Error{Code: api.CodeInvalidArgument, Message: "the image archive was refused: " + fmt.Sprintf(format, args...)}
}

// Open reads the image archive at file: a `docker save` archive (it has a
// manifest.json) or an OCI image layout archive (oci-layout, index.json,
// blobs/). An OCI layout is extracted into scratch, an empty directory the
// caller removes afterwards.
func Open(file, scratch string) (Archive, error) {
	names, err := entryNames(file)
	if err != nil {
		return Archive{}, err
	}
	var a Archive
	switch {
	case names["manifest.json"]:
		img, err := tarball.ImageFromPath(file, nil)
		if err != nil {
			return Archive{}, refuse("read the docker-save archive: %v", err)
		}
		a = Archive{Image: img, Format: FormatDocker}
	case names["index.json"] && names["oci-layout"]:
		if err := extractLayout(file, scratch); err != nil {
			return Archive{}, err
		}
		img, err := layoutImage(scratch)
		if err != nil {
			return Archive{}, err
		}
		a = Archive{Image: img, Format: FormatOCI}
	default:
		return Archive{}, refuse("it is neither a docker-save archive (manifest.json) nor an OCI image layout (oci-layout, index.json)")
	}
	if st, err := os.Stat(file); err == nil {
		a.Size = st.Size()
	}
	if a.Digest, err = a.Image.Digest(); err != nil {
		return Archive{}, refuse("read the manifest: %v", err)
	}
	return a, nil
}

// entryNames lists the names of the outer archive's entries.
func entryNames(file string) (map[string]bool, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	names := map[string]bool{}
	tr := tar.NewReader(f)
	for n := 0; ; n++ {
		if n > maxArchiveEntries {
			return nil, refuse("it has more than %d entries", maxArchiveEntries)
		}
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, refuse("it is not a tar archive: %v", err)
		}
		names[path.Clean(strings.TrimPrefix(h.Name, "./"))] = true
	}
	if len(names) == 0 {
		return nil, refuse("the archive is empty")
	}
	return names, nil
}

// layoutName is what an OCI layout holds: its two files and its blobs.
var layoutName = regexp.MustCompile(`^(oci-layout|index\.json|blobs/[a-z0-9]+/[a-f0-9]{32,128})$`)

// extractLayout writes the regular files of an OCI layout archive that an
// OCI layout has, and nothing else, into dir.
func extractLayout(file, dir string) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return refuse("read the OCI layout: %v", err)
		}
		name := path.Clean(strings.TrimPrefix(h.Name, "./"))
		if h.Typeflag != tar.TypeReg || !layoutName.MatchString(name) {
			continue
		}
		if err := root.MkdirAll(path.Dir(name), 0o700); err != nil {
			return err
		}
		out, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, os.ErrExist) {
			return refuse("the OCI layout holds %s twice", name)
		}
		if err != nil {
			return err
		}
		_, err = io.Copy(out, tr)
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("extract %s: %w", name, err)
		}
	}
}

// layoutImage finds the one image of an OCI layout: the index's only
// manifest, or through a nested index its linux/amd64 one (or its only
// one).
func layoutImage(dir string) (v1.Image, error) {
	p, err := layout.FromPath(dir)
	if err != nil {
		return nil, refuse("read the OCI layout: %v", err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		return nil, refuse("read the OCI layout's index: %v", err)
	}
	for depth := 0; depth < 2; depth++ {
		m, err := idx.IndexManifest()
		if err != nil {
			return nil, refuse("read the OCI layout's index: %v", err)
		}
		d, err := pick(m.Manifests)
		if err != nil {
			return nil, err
		}
		switch {
		case d.MediaType.IsImage():
			img, err := idx.Image(d.Digest)
			if err != nil {
				return nil, refuse("read image %s: %v", d.Digest, err)
			}
			return img, nil
		case d.MediaType.IsIndex():
			if idx, err = idx.ImageIndex(d.Digest); err != nil {
				return nil, refuse("read index %s: %v", d.Digest, err)
			}
		default:
			return nil, refuse("the index names a %q, not an image", d.MediaType)
		}
	}
	return nil, refuse("the OCI layout nests indexes too deep")
}

func pick(ds []v1.Descriptor) (v1.Descriptor, error) {
	if len(ds) == 1 {
		return ds[0], nil
	}
	for _, d := range ds {
		if d.Platform != nil && d.Platform.OS == "linux" && d.Platform.Architecture == "amd64" {
			return d, nil
		}
	}
	if len(ds) == 0 {
		return v1.Descriptor{}, refuse("the OCI layout's index names no image")
	}
	return v1.Descriptor{}, refuse("the OCI layout holds %d images and none for linux/amd64; export one image", len(ds))
}
