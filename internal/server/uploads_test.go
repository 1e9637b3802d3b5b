package server_test

import (
	"archive/tar"
	"bytes"
	"crypto/rand"
	"io"
	"sync"
	"testing"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/server"
	"github.com/cove-dev/cove/internal/sources"
)

func randomTar(t *testing.T, size int) []byte {
	t.Helper()
	body := make([]byte, size)
	rand.Read(body)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: "blob", Mode: 0o644, Size: int64(size), Typeflag: tar.TypeReg})
	tw.Write(body)
	tw.Close()
	return buf.Bytes()
}

// TestUploadsCountedTogether: a team's uploads in flight take its upload
// slots (429 past them, not another team's) and share its asset cap while
// their bytes arrive: parallel uploads cannot each pass it.
func TestUploadsCountedTogether(t *testing.T) {
	const assetCap = 4 << 20
	h := newHarnessWith(t, func(c *server.Config) {
		c.MaxUploadsPerTeam = 8
		c.MaxTeamAssetBytes = assetCap
		c.UploadDir = t.TempDir()
	})
	blobs, err := sources.NewBlobs(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	h.srv.SetAssetBlobs(blobs)

	bodies := make([][]byte, 8)
	for i := range bodies {
		bodies[i] = randomTar(t, 1<<20)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var stored int64
	var refused []error
	opened := make(chan struct{}, len(bodies))
	release := make(chan struct{})
	for i := range bodies {
		pr, pw := io.Pipe()
		wg.Go(func() {
			pw.Write(bodies[i][:1])
			opened <- struct{}{}
			<-release
			pw.Write(bodies[i][1:])
			pw.Close()
		})
		wg.Go(func() {
			a, _, err := h.srv.CreateAsset(t.Context(), h.a, server.AssetUpload{}, pr)
			pr.CloseWithError(io.ErrClosedPipe)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				refused = append(refused, err)
			} else {
				stored += a.Size
			}
		})
	}
	for range bodies {
		<-opened
	}
	// Every slot of team a is taken: a ninth upload waits its turn;
	// team b's is not held back.
	_, _, err = h.srv.CreateAsset(t.Context(), h.a, server.AssetUpload{}, bytes.NewReader(randomTar(t, 10)))
	if api.ErrorCode(err) != api.CodeResourceExhausted {
		t.Errorf("a ninth upload of team a: %v; want resource_exhausted", err)
	}
	if _, _, err := h.srv.CreateAsset(t.Context(), h.b, server.AssetUpload{}, bytes.NewReader(randomTar(t, 10))); err != nil {
		t.Errorf("team b's upload: %v", err)
	}
	close(release)
	wg.Wait()
	if stored > assetCap || len(refused) == 0 {
		t.Fatalf("8 uploads of 1 MiB under a 4 MiB cap: %d bytes stored, %d refused", stored, len(refused))
	}
	for _, err := range refused {
		if api.ErrorCode(err) != api.CodeInsufficientStorage {
			t.Errorf("a refused upload: %v; want insufficient_storage", err)
		}
	}
	used, err := h.st.AssetBytes(t.Context(), h.a)
	if err != nil || used != stored || used > assetCap {
		t.Fatalf("team a's assets use %d bytes (%v); %d were stored, the cap is %d", used, err, stored, assetCap)
	}
}
