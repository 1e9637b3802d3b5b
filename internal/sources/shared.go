package sources

import (
	"context"
	"fmt"
	"io"
	"math"

	"github.com/cove-dev/cove/api"
)

// Remote is a content-addressed store every replica of the control plane
// reads: the save store's blobs (internal/node/saves), by the digest
// "sha256:<hex>" of their bytes. PutBlob refuses bytes of another digest;
// GetBlob answers not_found for a missing blob, and its reader fails at
// its end when the bytes are not the digest's.
type Remote interface {
	PutBlob(ctx context.Context, digest string, r io.Reader) error
	GetBlob(ctx context.Context, digest string) (io.ReadCloser, error)
}

// Shared keeps assets' bytes in a Remote, so that every replica serves
// an asset any of them took, with a local Blobs as the staging area of an
// upload and the cache of what was read. An upload is checked and
// summed locally, then published under its digest before Put returns: a
// row recorded after Put names bytes every replica can fetch.
//
// Teams stay apart where they are read: the remote holds bytes by digest
// only, and a team reaches them only through its own asset row (the
// caller's) and its own local directory; a blob fetched for a team is
// checked against the digest before it is kept.
type Shared struct {
	local  *Blobs
	remote Remote
}

// NewShared keeps assets in remote, staged and cached in local.
func NewShared(local *Blobs, remote Remote) *Shared {
	return &Shared{local: local, remote: remote}
}

// Digest is the name of an asset's bytes (sha-256 hex) in a Remote.
func Digest(sum string) string { return "sha256:" + sum }

// Put stores r's bytes for the team locally (see Blobs.Put) and publishes
// them to the remote; on a failure to publish, nothing is kept.
func (s *Shared) Put(ctx context.Context, teamID string, r io.Reader, max int64, want string) (string, int64, error) {
	sum, size, err := s.local.Put(ctx, teamID, r, max, want)
	if err != nil {
		return "", 0, err
	}
	if err := s.publish(ctx, teamID, sum); err != nil {
		// A row made before has its bytes in the remote already:
		// dropping the local copy only makes this replica fetch them.
		s.local.Remove(ctx, teamID, sum)
		return "", 0, fmt.Errorf("publish asset bytes %s to the save store: %w", sum, err)
	}
	return sum, size, nil
}

func (s *Shared) publish(ctx context.Context, teamID, sum string) error {
	rc, err := s.local.Open(ctx, teamID, sum)
	if err != nil {
		return err
	}
	defer rc.Close()
	return s.remote.PutBlob(ctx, Digest(sum), rc)
}

// Open reads the team's blob from the local cache, fetching it from the
// remote first when this replica does not have it; the bytes are checked
// against sum as they arrive and again as they are read.
func (s *Shared) Open(ctx context.Context, teamID, sum string) (io.ReadCloser, error) {
	rc, err := s.local.Open(ctx, teamID, sum)
	if api.ErrorCode(err) != api.CodeNotFound {
		return rc, err
	}
	remote, err := s.remote.GetBlob(ctx, Digest(sum))
	if api.ErrorCode(err) == api.CodeNotFound {
		return nil, api.Errorf(api.CodeNotFound, "the bytes of asset %s are missing from the save store", sum)
	}
	if err != nil {
		return nil, fmt.Errorf("fetch asset bytes %s from the save store: %w", sum, err)
	}
	defer remote.Close()
	// The size was bounded at upload; the digest given as want refuses
	// any other bytes.
	if _, _, err := s.local.Put(ctx, teamID, remote, math.MaxInt64-1, sum); err != nil {
		return nil, fmt.Errorf("fetch asset bytes %s from the save store: %w", sum, err)
	}
	return s.local.Open(ctx, teamID, sum)
}

// Remove deletes the team's local copy. The remote blob stays: it is
// named by its bytes alone and may be another team's or another asset's
// too (an asset row, per team, is what grants access to it).
func (s *Shared) Remove(ctx context.Context, teamID, sum string) error {
	return s.local.Remove(ctx, teamID, sum)
}
