package assets_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/assets"
	"github.com/cove-dev/cove/internal/control/uploads"
	"github.com/cove-dev/cove/internal/node"
	"github.com/cove-dev/cove/internal/node/nodetest"
	"github.com/cove-dev/cove/internal/sources"
	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/internal/store/sqlite"
)

const (
	teamA = "team_a"
	teamB = "team_b"
)

// rig is the asset service over a real SQLite store, blobs on disk and
// the fake node.
type rig struct {
	svc     *assets.Service
	st      store.Store
	node    *nodetest.Node
	uploads *uploads.Ledger
	blobDir string
}

type noSandboxes struct{}

func (noSandboxes) LiveSandbox(ctx context.Context, teamID, ref string, wake bool) (api.Sandbox, error) {
	return api.Sandbox{}, api.Errorf(api.CodeNotFound, "sandbox %s not found", ref)
}

func newRig(t *testing.T, cfg assets.Config, perTeam int) *rig {
	t.Helper()
	ctx := t.Context()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "cove.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	for _, id := range []string{teamA, teamB} {
		if err := st.CreateTeam(ctx, api.Team{ID: id, Name: id, CreatedAt: time.Now().UTC()}); err != nil {
			t.Fatal(err)
		}
	}
	nd := nodetest.New()
	t.Cleanup(nd.Close)
	dir := t.TempDir()
	blobs, err := sources.NewBlobs(dir)
	if err != nil {
		t.Fatal(err)
	}
	ul := uploads.New(uploads.Config{MaxPerTeam: perTeam, Dir: t.TempDir()}, nil)
	if cfg.MaxBytes == 0 {
		cfg.MaxBytes = 1 << 30
	}
	svc := assets.New(cfg, st, nd, noSandboxes{}, ul, func() time.Time { return time.Now().UTC() }, slog.New(slog.DiscardHandler))
	svc.SetBlobs(blobs)
	return &rig{svc: svc, st: st, node: nd, uploads: ul, blobDir: dir}
}

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
	r := newRig(t, assets.Config{MaxTeamBytes: assetCap}, 8)

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
			a, _, err := r.svc.CreateAsset(t.Context(), teamA, assets.Upload{}, pr)
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
	_, _, err := r.svc.CreateAsset(t.Context(), teamA, assets.Upload{}, bytes.NewReader(randomTar(t, 10)))
	if api.ErrorCode(err) != api.CodeResourceExhausted {
		t.Errorf("a ninth upload of team a: %v; want resource_exhausted", err)
	}
	if _, _, err := r.svc.CreateAsset(t.Context(), teamB, assets.Upload{}, bytes.NewReader(randomTar(t, 10))); err != nil {
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
	used, err := r.st.AssetBytes(t.Context(), teamA)
	if err != nil || used != stored || used > assetCap {
		t.Fatalf("team a's assets use %d bytes (%v); %d were stored, the cap is %d", used, err, stored, assetCap)
	}
}

// countingReader counts what was read of a body.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// TestCapWhileBytesArrive: the team's asset cap is checked as the bytes
// arrive, against what the team keeps: a body of unknown length is cut
// once past it, a body whose length is known and does not fit is refused
// before its first byte, and neither keeps anything.
func TestCapWhileBytesArrive(t *testing.T) {
	const assetCap = 2 << 20
	tests := []struct {
		name       string
		kept       int      // bytes of an asset stored first
		size       int      // the new asset's content
		known      bool     // the client says its length
		wantCode   api.Code // "" stored
		readAtMost int64    // of the body, when refused
	}{
		{name: "fits", kept: 1 << 20, size: 512 << 10},
		{name: "fits, known length", kept: 1 << 20, size: 512 << 10, known: true},
		{name: "past the cap", kept: 1 << 20, size: 3 << 20 / 2, wantCode: api.CodeInsufficientStorage, readAtMost: 3 << 20 / 2},
		{name: "past the cap, known length", kept: 1 << 20, size: 3 << 20 / 2, known: true, wantCode: api.CodeInsufficientStorage, readAtMost: 0},
		{name: "larger than the cap alone", size: 3 << 20, wantCode: api.CodeInsufficientStorage, readAtMost: assetCap + 512<<10}, // a read buffer past the cap
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, assets.Config{MaxTeamBytes: assetCap}, 4)
			ctx := t.Context()
			if tt.kept > 0 {
				if _, _, err := r.svc.CreateAsset(ctx, teamA, assets.Upload{}, bytes.NewReader(randomTar(t, tt.kept))); err != nil {
					t.Fatal(err)
				}
			}
			before, _ := r.st.AssetBytes(ctx, teamA)
			body := randomTar(t, tt.size)
			req := assets.Upload{Name: "new"}
			if tt.known {
				req.Size = int64(len(body))
			}
			cr := &countingReader{r: bytes.NewReader(body)}
			a, created, err := r.svc.CreateAsset(ctx, teamA, req, cr)
			after, _ := r.st.AssetBytes(ctx, teamA)
			if tt.wantCode == "" {
				if err != nil || !created || after != before+a.Size {
					t.Fatalf("create: %v (created %v); the team's bytes went from %d to %d", err, created, before, after)
				}
				return
			}
			if api.ErrorCode(err) != tt.wantCode {
				t.Fatalf("create: %v; want %s", err, tt.wantCode)
			}
			if after != before {
				t.Errorf("a refused asset changed the team's bytes from %d to %d", before, after)
			}
			if cr.n > tt.readAtMost {
				t.Errorf("read %d bytes of the refused body; want at most %d", cr.n, tt.readAtMost)
			}
			l, err := r.svc.ListAssets(ctx, teamA, "", 0)
			if err != nil || len(l.Items) != min(tt.kept, 1) {
				t.Errorf("assets after the refusal: %+v, %v", l.Items, err)
			}
		})
	}
}

// TestDeleteAsset: deleting an asset removes its row and its bytes, so
// its size no longer counts against the team's cap, and only its own
// team may delete it.
func TestDeleteAsset(t *testing.T) {
	const assetCap = 3 << 20
	r := newRig(t, assets.Config{MaxTeamBytes: assetCap}, 4)
	ctx := t.Context()
	a, _, err := r.svc.CreateAsset(ctx, teamA, assets.Upload{Name: "big"}, bytes.NewReader(randomTar(t, 2<<20)))
	if err != nil {
		t.Fatal(err)
	}
	second := randomTar(t, 2<<20)
	if _, _, err := r.svc.CreateAsset(ctx, teamA, assets.Upload{}, bytes.NewReader(second)); api.ErrorCode(err) != api.CodeInsufficientStorage {
		t.Fatalf("a second 2 MiB asset under a 3 MiB cap: %v; want insufficient_storage", err)
	}
	if err := r.svc.DeleteAsset(ctx, teamB, a.ID); api.ErrorCode(err) != api.CodeNotFound {
		t.Fatalf("team b deletes team a's asset: %v; want not_found", err)
	}
	if err := r.svc.DeleteAsset(ctx, teamA, a.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := r.svc.GetAsset(ctx, teamA, a.ID); api.ErrorCode(err) != api.CodeNotFound {
		t.Errorf("the deleted asset: %v; want not_found", err)
	}
	if _, err := os.Stat(filepath.Join(r.blobDir, teamA, a.SHA256)); !os.IsNotExist(err) {
		t.Errorf("the deleted asset's bytes: %v; want them gone", err)
	}
	if used, err := r.st.AssetBytes(ctx, teamA); err != nil || used != 0 {
		t.Errorf("team a's assets use %d bytes (%v) after the delete", used, err)
	}
	if _, _, err := r.svc.CreateAsset(ctx, teamA, assets.Upload{}, bytes.NewReader(second)); err != nil {
		t.Fatalf("the second asset once the first is deleted: %v", err)
	}
}

// TestLand: a sandbox created from an asset gets the asset's bytes in its
// folder, owned by the user given, and the asset's digest; bytes damaged
// on disk land nothing.
func TestLand(t *testing.T) {
	r := newRig(t, assets.Config{}, 4)
	ctx := t.Context()
	body := randomTar(t, 4<<10)
	a, _, err := r.svc.CreateAsset(ctx, teamA, assets.Upload{}, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.node.Start(ctx, node.SandboxSpec{ID: "sb_1"}); err != nil {
		t.Fatal(err)
	}
	if err := r.svc.CheckSource(ctx, teamA, &api.Source{Type: api.SourceAsset, AssetID: a.ID}); err != nil {
		t.Fatalf("team a's asset as a source: %v", err)
	}
	if err := r.svc.CheckSource(ctx, teamB, &api.Source{Type: api.SourceAsset, AssetID: a.ID}); api.ErrorCode(err) != api.CodeNotFound {
		t.Fatalf("team a's asset as team b's source: %v; want not_found", err)
	}
	digest, err := r.svc.Land(ctx, teamA, "sb_1", "/workspace", a.ID, node.User{UID: 1000, GID: 1000})
	if err != nil || digest != a.SHA256 {
		t.Fatalf("land: %q, %v; want digest %s", digest, err, a.SHA256)
	}
	sb, _ := r.node.Sandbox("sb_1")
	if got := sb.Files["/workspace/.archive"]; !bytes.Equal(got, body) {
		t.Fatalf("the sandbox got %d bytes; want the asset's %d", len(got), len(body))
	}

	// Damage the stored bytes: nothing lands.
	if err := r.node.Start(ctx, node.SandboxSpec{ID: "sb_2"}); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(r.blobDir, teamA, a.SHA256)
	damaged := bytes.Clone(body)
	damaged[600] ^= 0xff
	if err := os.WriteFile(p, damaged, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := r.svc.Land(ctx, teamA, "sb_2", "/workspace", a.ID, node.User{UID: 1000, GID: 1000}); err == nil {
		t.Fatal("damaged bytes landed")
	}
	sb, _ = r.node.Sandbox("sb_2")
	if _, ok := sb.Files["/workspace/.archive"]; ok {
		t.Fatal("damaged bytes reached the sandbox")
	}
}
