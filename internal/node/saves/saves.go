// Package saves keeps the files of sleeping sandboxes. A save holds the
// sandbox's disk image, as one compressed archive of its data extents, and
// the command output the node recorded for it, under a manifest naming
// their sizes and checksums.
//
// Every save is written under a new generation (its name given by the
// node) with its manifest last: a save without a manifest is incomplete
// and is never restored nor taken for the newest. Restore and Stat read
// exactly the generation asked for, or the newest complete one for "".
//
// Two stores implement Store: Dir, a directory on the node that keeps
// only the newest save of each sandbox (one host), and S3, a bucket of an
// S3-compatible service shared by every node of a fleet, which keeps every
// generation until Delete. Open picks one from a URL.
//
// The disk archive stores only the data extents of the sparse disk image
// (found with SEEK_DATA and SEEK_HOLE), gzip-compressed: a 4 GiB disk
// holding 100 MiB saves about 100 MiB before compression.
package saves

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/cove-dev/cove/api"
)

// Store keeps saves by sandbox ID and generation.
type Store interface {
	// Save archives files as generation gen of the save of id. The save
	// is complete, and taken for the newest, only once Save returned.
	Save(ctx context.Context, id, gen string, files Files) (Manifest, error)
	// Restore writes generation gen of the save of id ("" the newest
	// complete one) into files: the disk as a sparse image at
	// files.Disk, and, when files.Output is set, the recorded output as
	// that directory (which must not exist). On failure neither is left.
	Restore(ctx context.Context, id, gen string, files Files) (Manifest, error)
	// Stat returns the manifest of generation gen ("" the newest
	// complete one), or not_found.
	Stat(ctx context.Context, id, gen string) (Manifest, error)
	// Delete removes every generation of the save of id; a missing save
	// is no error.
	Delete(ctx context.Context, id string) error
	// Prune removes every generation of the save of id but keep (and
	// saves cut short): what the control plane calls once it recorded
	// keep as the sandbox's save, never a node after its own save, which
	// could be a zombie's.
	Prune(ctx context.Context, id, keep string) error
	// Blobs keep imported images by digest.
	Blobs
	// Close releases the store's connections.
	Close() error
}

// Blobs keep content-addressed files: imported images, by the sha256
// digest ("sha256:<hex>") of their bytes.
type Blobs interface {
	// PutBlob stores what r holds as the blob of digest, refusing it
	// (and keeping nothing) when its bytes have another digest.
	PutBlob(ctx context.Context, digest string, r io.Reader) error
	// GetBlob returns the blob of digest, or not_found. Its reader
	// fails at the end when the bytes do not have that digest.
	GetBlob(ctx context.Context, digest string) (io.ReadCloser, error)
}

// Files are the paths of a save's content on the node.
type Files struct {
	// Disk is the sandbox's sparse disk image.
	Disk string
	// Output is the directory of its recorded command output; "" saves
	// or restores none.
	Output string
}

// Manifest describes a complete save.
type Manifest struct {
	SandboxID    string `json:"sandbox_id"`
	Generation   string `json:"generation,omitempty"`
	Format       string `json:"format"`
	DiskBytes    int64  `json:"disk_bytes"`    // the image's apparent size
	DataBytes    int64  `json:"data_bytes"`    // bytes in its data extents
	ArchiveBytes int64  `json:"archive_bytes"` // the compressed archive
	SHA256       string `json:"sha256"`        // of the archive file
	// OutputBytes and OutputSHA256 describe the archive of the recorded
	// output; a save without one (OutputSHA256 "") holds no output.
	OutputBytes  int64     `json:"output_bytes,omitempty"`
	OutputSHA256 string    `json:"output_sha256,omitempty"`
	CreatedAt    time.Time `json:"created_at"`
}

// HasOutput reports that the save holds recorded output.
func (m Manifest) HasOutput() bool { return m.OutputSHA256 != "" }

const (
	// format is what a save writes: its archives are zstd-compressed.
	// formatGzip is what saves were before, gzip-compressed, and still
	// restore: the archives' first bytes tell the two apart. The archives
	// keep their names in either.
	format     = "cove-sparse-zstd-1"
	formatGzip = "cove-sparse-gzip-1"
	// extentsHeader opens the disk archive's content, whatever its
	// compression: the layout of extents has not changed since gzip.
	extentsHeader = "cove-sparse-gzip-1"
	archiveName   = "disk.gz"
	outputName    = "output.tar.gz"
	manifest      = "manifest.json"
	endMarker     = ^uint64(0)
	chunk         = 1 << 20
)

// Open returns the store a URL names: a path is a Dir there; an
// s3://bucket/prefix?endpoint=http://HOST:PORT URL is a bucket of an
// S3-compatible service (see OpenS3), with credentials from credsFile when
// it is set.
func Open(ctx context.Context, rawURL, credsFile string) (Store, error) {
	if rawURL == "" {
		return nil, api.Errorf(api.CodeInvalidArgument, "saves: no store given")
	}
	if strings.HasPrefix(rawURL, "/") || strings.HasPrefix(rawURL, ".") || !strings.Contains(rawURL, ":") {
		if credsFile != "" {
			return nil, api.Errorf(api.CodeInvalidArgument, "saves: credentials are for an s3:// store, not the directory %s", rawURL)
		}
		return NewDir(rawURL)
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, api.Errorf(api.CodeInvalidArgument, "saves: %q is neither a path nor an s3:// URL: %v", rawURL, err)
	}
	if u.Scheme != "s3" {
		return nil, api.Errorf(api.CodeInvalidArgument, "saves: %q is neither a path nor an s3://bucket/prefix URL (scheme %q)", rawURL, u.Scheme)
	}
	return OpenS3(ctx, u, credsFile)
}

// checkID refuses a sandbox ID that is no single path segment.
func checkID(id string) error {
	if id == "" || len(id) > 128 || strings.HasPrefix(id, ".") || strings.ContainsAny(id, `/\`) || strings.ContainsFunc(id, isCtl) {
		return api.Errorf(api.CodeInvalidArgument, "save id %q is not a valid name", id)
	}
	return nil
}

// checkGen refuses a generation name outside [0-9A-Za-z_-], 1 to 64 long.
func checkGen(gen string) error {
	ok := gen != "" && len(gen) <= 64
	for _, r := range gen {
		if !(r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r == '-' || r == '_') {
			ok = false
		}
	}
	if !ok {
		return api.Errorf(api.CodeInvalidArgument, "save generation %q is not a valid name", gen)
	}
	return nil
}

func isCtl(r rune) bool { return r < 0x20 || r == 0x7f }

// Generation is a generation's name for a node of epoch at time t:
// "<epoch>-<unix nanos>".
func Generation(epoch uint64, t time.Time) string {
	return strconv.FormatUint(epoch, 10) + "-" + strconv.FormatInt(t.UnixNano(), 10)
}

// newer reports whether generation a is newer than b: by the time in the
// name first ("<epoch>-<unix nanos>", epochs are per node so they only
// break ties), then by the name; a name of another shape is older than
// any of that shape.
func newer(a, b string) bool {
	ea, ta, oka := splitGen(a)
	eb, tb, okb := splitGen(b)
	switch {
	case oka != okb:
		return oka
	case !oka:
		return a > b
	case ta != tb:
		return ta > tb
	case ea != eb:
		return ea > eb
	}
	return a > b
}

func splitGen(g string) (epoch uint64, nanos int64, ok bool) {
	e, t, found := strings.Cut(g, "-")
	if !found {
		return 0, 0, false
	}
	epoch, err1 := strconv.ParseUint(e, 10, 64)
	nanos, err2 := strconv.ParseInt(t, 10, 64)
	return epoch, nanos, err1 == nil && err2 == nil
}

// checkManifest checks a manifest read from a store against what was
// asked for.
func checkManifest(m Manifest, id, gen string) error {
	if (m.Format != format && m.Format != formatGzip) || m.SandboxID != id || (gen != "" && m.Generation != gen) {
		return fmt.Errorf("save of %s: manifest is unreadable or names another save", id)
	}
	return nil
}
