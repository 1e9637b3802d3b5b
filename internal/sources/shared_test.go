package sources

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/node/saves"
)

// replicas are two Shared stores, each with its own data dir, over one
// save store.
func replicas(t *testing.T) (a, b *Shared, remote *saves.Dir, remoteDir string) {
	t.Helper()
	remoteDir = t.TempDir()
	remote, err := saves.NewDir(remoteDir)
	if err != nil {
		t.Fatal(err)
	}
	mk := func() *Shared {
		local, err := NewBlobs(filepath.Join(t.TempDir(), "assets"))
		if err != nil {
			t.Fatal(err)
		}
		return NewShared(local, remote)
	}
	return mk(), mk(), remote, remoteDir
}

func readAll(t *testing.T, rc io.ReadCloser) []byte {
	t.Helper()
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestSharedAcrossReplicas(t *testing.T) {
	ctx := context.Background()
	a, b, _, _ := replicas(t)
	data := archive(t, true, tar.Header{Name: "f", Typeflag: tar.TypeReg})
	sum, size, err := a.Put(ctx, "team_a", bytes.NewReader(data), 1<<20, "")
	if err != nil {
		t.Fatal(err)
	}
	if sum != hexSum(data) || size != int64(len(data)) {
		t.Fatalf("Put = %s %d", sum, size)
	}
	// Replica b never saw the upload: it fetches the bytes.
	if got := readAll(t, mustOpen(t, b, "team_a", sum)); !bytes.Equal(got, data) {
		t.Fatal("replica b read other bytes")
	}
	// Its cache now has them.
	if _, err := b.local.Open(ctx, "team_a", sum); err != nil {
		t.Fatalf("not cached: %v", err)
	}
	// Removing drops a replica's copy; another still serves.
	if err := a.Remove(ctx, "team_a", sum); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, mustOpen(t, a, "team_a", sum)); !bytes.Equal(got, data) {
		t.Fatal("refetch read other bytes")
	}
	if _, err := b.Open(ctx, "team_a", hexSum([]byte("never stored"))); api.ErrorCode(err) != api.CodeNotFound {
		t.Fatalf("missing blob: %v", err)
	}
}

func mustOpen(t *testing.T, s *Shared, team, sum string) io.ReadCloser {
	t.Helper()
	rc, err := s.Open(context.Background(), team, sum)
	if err != nil {
		t.Fatal(err)
	}
	return rc
}

// TestSharedDamagedRemote: bytes changed in the save store are refused
// when a replica fetches them, and nothing is cached.
func TestSharedDamagedRemote(t *testing.T) {
	ctx := context.Background()
	a, b, _, remoteDir := replicas(t)
	data := archive(t, false, tar.Header{Name: "f", Typeflag: tar.TypeReg})
	sum, _, err := a.Put(ctx, "team_a", bytes.NewReader(data), 1<<20, "")
	if err != nil {
		t.Fatal(err)
	}
	var found string
	filepath.WalkDir(remoteDir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			found = p
		}
		return nil
	})
	if found == "" {
		t.Fatal("no blob in the save store")
	}
	bad := bytes.Clone(data)
	bad[len(bad)-1] ^= 1
	if err := os.WriteFile(found, bad, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Open(ctx, "team_a", sum); err == nil {
		t.Fatal("damaged bytes were served")
	}
	if _, err := b.local.Open(ctx, "team_a", sum); api.ErrorCode(err) != api.CodeNotFound {
		t.Fatalf("damaged bytes were cached: %v", err)
	}
}

type failingRemote struct{ saves.Blobs }

func (failingRemote) PutBlob(ctx context.Context, digest string, r io.Reader) error {
	return errors.New("bucket unreachable")
}

// TestSharedPublishFails: an upload the save store did not take is an
// error and leaves nothing behind.
func TestSharedPublishFails(t *testing.T) {
	ctx := context.Background()
	local, err := NewBlobs(filepath.Join(t.TempDir(), "assets"))
	if err != nil {
		t.Fatal(err)
	}
	s := NewShared(local, failingRemote{})
	data := archive(t, false, tar.Header{Name: "f", Typeflag: tar.TypeReg})
	if _, _, err := s.Put(ctx, "team_a", bytes.NewReader(data), 1<<20, ""); err == nil {
		t.Fatal("Put succeeded without the save store")
	}
	if _, err := local.Open(ctx, "team_a", hexSum(data)); api.ErrorCode(err) != api.CodeNotFound {
		t.Fatalf("bytes kept: %v", err)
	}
}
