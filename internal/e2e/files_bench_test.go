package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
	cove "github.com/cove-dev/cove/sdk/go"
)

// patternReader yields size bytes cycling through a random block: fast to
// produce, incompressible enough, and hashed as it goes.
type patternReader struct {
	block []byte
	left  int64
	off   int
	h     hash.Hash
}

func newPattern(size int64) *patternReader {
	b := make([]byte, 1<<20+7) // not a power of two: no aligned repeats
	rand.Read(b)
	return &patternReader{block: b, left: size, h: sha256.New()}
}

func (p *patternReader) Read(b []byte) (int, error) {
	if p.left == 0 {
		return 0, io.EOF
	}
	n := copy(b, p.block[p.off:])
	n = int(min(int64(n), p.left))
	p.h.Write(b[:n])
	p.off = (p.off + n) % len(p.block)
	p.left -= int64(n)
	return n, nil
}

// transferResult is one round of a large upload and download.
type transferResult struct {
	upload, download, downloadRehash float64 // MB/s
	maxRSS                           int64
	sum                              []byte
}

// transfer uploads size bytes through the SDK, downloads them twice (once
// with the digest remembered from the upload, once after a touch made the
// agent read the file twice) and samples the server's RSS all along. The
// SDK checks the digests; so does the caller, against the bytes it sent.
func transfer(t testing.TB, s *e2etest.Server, ref, path string, size int64) transferResult {
	t.Helper()
	ctx := context.Background()
	stop := make(chan struct{})
	sampled := make(chan int64)
	go func() { sampled <- sampleRSS(s.PID(), stop) }() // owned: received below
	var res transferResult

	src := newPattern(size)
	start := time.Now()
	e, err := s.Admin.WriteFile(ctx, ref, path, src)
	if err != nil {
		close(stop)
		<-sampled
		t.Fatalf("upload: %v", err)
	}
	res.upload = float64(size) / time.Since(start).Seconds() / 1e6
	res.sum = src.h.Sum(nil)
	if e.Size != size {
		t.Errorf("uploaded entry has size %d, want %d", e.Size, size)
	}

	download := func() float64 {
		h := sha256.New()
		start := time.Now()
		f, err := s.Admin.DownloadFile(ctx, ref, path, h)
		if err != nil {
			t.Fatalf("download: %v", err)
		}
		rate := float64(size) / time.Since(start).Seconds() / 1e6
		if !bytes.Equal(h.Sum(nil), res.sum) || !bytes.Equal(f.Digest, res.sum) {
			t.Errorf("downloaded sha-256 %x, Repr-Digest %x; uploaded %x", h.Sum(nil), f.Digest, res.sum)
		}
		return rate
	}
	res.download = download()
	e2etest.Sh(t, s.Admin, ref, "touch "+path) // a new version: the agent hashes it again
	res.downloadRehash = download()
	close(stop)
	res.maxRSS = <-sampled
	return res
}

// cpRate copies a file of size bytes with cp on the host, in the same
// place the tests keep their data, and returns MB/s.
func cpRate(t testing.TB, size int64) float64 {
	t.Helper()
	dir, err := os.MkdirTemp("/var/tmp", "cove-cp-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	src := filepath.Join(dir, "src")
	f, err := os.Create(src)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(f, newPattern(size)); err != nil {
		t.Fatal(err)
	}
	f.Close()
	start := time.Now()
	if out, err := exec.Command("sh", "-c", fmt.Sprintf("cp %s %s/dst && sync %s/dst", src, dir, dir)).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	return float64(size) / time.Since(start).Seconds() / 1e6
}

const largeSize = 1 << 30

func largeSandbox(t testing.TB, s *e2etest.Server) api.Sandbox {
	disk := int64(3072)
	return e2etest.Create(t, s.Admin, api.CreateSandboxRequest{Resources: &api.ResourcesRequest{DiskMiB: &disk}})
}

// TestFilesLarge moves 1 GiB up and down: the digests agree end to end
// (the SDK's, the server's Repr-Digest, and sha256sum inside the sandbox)
// and the server's resident memory stays under 100 MiB throughout.
func TestFilesLarge(t *testing.T) {
	if testing.Short() {
		t.Skip("moves 1 GiB; not with -short")
	}
	s := e2etest.StartServer(t)
	sb := largeSandbox(t, s)
	res := transfer(t, s, sb.ID, "/workspace/big.bin", largeSize)
	t.Logf("upload %.0f MB/s, download %.0f MB/s (rehashed %.0f MB/s), server max RSS %.1f MiB",
		res.upload, res.download, res.downloadRehash, float64(res.maxRSS)/(1<<20))
	if res.maxRSS == 0 || res.maxRSS >= 100<<20 {
		t.Errorf("server max RSS %.1f MiB, want under 100 MiB", float64(res.maxRSS)/(1<<20))
	}
	out := e2etest.MustOK(t, s.Admin, sb.ID, "sha256sum /workspace/big.bin", e2etest.WithTimeout(600))
	if got := strings.Fields(out); len(got) == 0 || got[0] != hex.EncodeToString(res.sum) {
		t.Errorf("sha256sum in the sandbox: %q, want %x", out, res.sum)
	}
	// A download cut by its reader leaves no trouble for the next.
	f, err := s.Admin.ReadFile(t.Context(), sb.ID, "/workspace/big.bin", cove.ByteRange(largeSize-3, -1))
	if err != nil {
		t.Fatal(err)
	}
	tail, _ := io.ReadAll(f)
	f.Close()
	if len(tail) != 3 {
		t.Errorf("last 3 bytes: %d bytes", len(tail))
	}
}

// BenchmarkFileTransfer uploads and downloads 1 GiB through the API (SDK →
// cove serve → agent → the sandbox's disk) next to a `cp` of the same size
// on the host in the same run, and samples the server's RSS.
func BenchmarkFileTransfer(b *testing.B) {
	s := e2etest.StartServer(b)
	sb := largeSandbox(b, s)
	var up, down, rehash, cp []float64
	var maxRSS int64
	for b.Loop() {
		res := transfer(b, s, sb.ID, "/workspace/big.bin", largeSize)
		up, down, rehash = append(up, res.upload), append(down, res.download), append(rehash, res.downloadRehash)
		maxRSS = max(maxRSS, res.maxRSS)
		b.StopTimer()
		cp = append(cp, cpRate(b, largeSize))
		b.StartTimer()
	}
	b.ReportMetric(medianF(up), "upload-MB/s")
	b.ReportMetric(medianF(down), "download-MB/s")
	b.ReportMetric(medianF(rehash), "download-rehash-MB/s")
	b.ReportMetric(medianF(cp), "cp-MB/s")
	b.ReportMetric(float64(maxRSS)/(1<<20), "server-max-rss-MiB")
}
