// Package uploads holds the root tests of tenants' uploads (images,
// assets, source uploads) as a hostile tenant sends them: trickled so
// that they stay open, stopped mid-body, in parallel past the team's
// caps, and as decompression bombs. None of it may stall another team,
// fill the data disk or leave files behind.
package uploads

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
	it "github.com/cove-dev/cove/internal/images/imagetest"
	"github.com/cove-dev/cove/internal/node/image"
	cove "github.com/cove-dev/cove/sdk/go"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"golang.org/x/sys/unix"
)

func TestMain(m *testing.M) { e2etest.Main(m) }

// server is a cove serve with an images dir of its own (busybox built
// into it), so that a test sees every file its uploads leave.
type server struct {
	*e2etest.Server
	imagesDir string
}

func startServer(t *testing.T, opts ...e2etest.ServerOpt) server {
	t.Helper()
	e2etest.RequireRoot(t)
	dir, err := os.MkdirTemp("/var/tmp", "cove-e2e-uploads-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o711)
	t.Cleanup(func() { os.RemoveAll(dir) })
	if _, err := image.BuildBusybox(t.Context(), dir, "busybox"); err != nil {
		t.Fatal(err)
	}
	s := e2etest.StartServer(t, append([]e2etest.ServerOpt{e2etest.WithArgs("--images-dir", dir, "--warm-pool", "0")}, opts...)...)
	return server{s, dir}
}

// team is a new team that may import images.
func (s server) team(t *testing.T, name string) *cove.Client {
	t.Helper()
	c := s.NewTeam(name + "-" + e2etest.RunID())
	me, err := c.Admission(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Admin.SetAdmission(t.Context(), me.Team.ID, api.Admission{ManagedEnvironment: true, CustomImages: true}); err != nil {
		t.Fatal(err)
	}
	return c
}

// leftovers lists the temporary files of uploads anywhere they may be:
// the upload dir, assets' .part files, image imports' work dirs.
func (s server) leftovers(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, pat := range []string{
		filepath.Join(s.DataDir, "uploads", "*"),
		filepath.Join(s.DataDir, "assets", "*", ".part-*"),
		filepath.Join(s.imagesDir, "v2", ".upload-*"),
		filepath.Join(s.imagesDir, "v2", ".*.tmp-*"),
	} {
		m, _ := filepath.Glob(pat)
		out = append(out, m...)
	}
	return out
}

// waitFor waits (bounded) until cond holds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 2 minutes for %s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// trickle is a request body that sends one byte a second until stopped
// (the request then fails on the client's side).
type trickle struct {
	pw   *io.PipeWriter
	stop chan struct{}
	wg   sync.WaitGroup
}

func newTrickle(first []byte) (*trickle, io.Reader) {
	pr, pw := io.Pipe()
	tr := &trickle{pw: pw, stop: make(chan struct{})}
	tr.wg.Go(func() {
		if _, err := pw.Write(first); err != nil {
			return
		}
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-tr.stop:
				return
			case <-tick.C:
				if _, err := pw.Write([]byte{0}); err != nil {
					return
				}
			}
		}
	})
	return tr, pr
}

func (tr *trickle) Stop() {
	close(tr.stop)
	tr.wg.Wait()
	tr.pw.CloseWithError(errors.New("the test stopped sending"))
}

// result is what an upload running in the background came to.
type result struct {
	what string
	err  error
}

func busyboxArchive(t *testing.T, extra ...it.Entry) string {
	t.Helper()
	layers := []v1.Layer{it.Busybox(t, false, "", "")}
	if len(extra) > 0 {
		layers = append(layers, it.Layer(t, extra...))
	}
	path := filepath.Join(t.TempDir(), "image.tar")
	it.OCIArchive(t, it.Image(t, v1.Config{}, layers...), path, nil)
	return path
}

func importFile(ctx context.Context, t *testing.T, c *cove.Client, name, path string) (api.Image, error) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return c.ImportImage(ctx, name, nil, f)
}

// TestNoTeamStalls: while team A trickles an image import, an asset and
// a source upload at a byte a second, team B creates a sandbox from its
// own image, deletes an image and submits a workload, each to its end,
// and A's uploads are all still open when B is done. Stopping A's uploads
// leaves no file behind.
func TestNoTeamStalls(t *testing.T) {
	s := startServer(t)
	a, b := s.team(t, "stall-a"), s.team(t, "stall-b")
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	bImg, err := importFile(ctx, t, b, "b-own-"+e2etest.RunID(), busyboxArchive(t))
	if err != nil {
		t.Fatal(err)
	}
	bGone, err := importFile(ctx, t, b, "b-gone-"+e2etest.RunID(), busyboxArchive(t, it.File("gone", "x", 0o644)))
	if err != nil {
		t.Fatal(err)
	}
	waiting, err := a.CreateSandbox(ctx, api.CreateSandboxRequest{Source: &api.Source{Type: api.SourceUpload}}, false)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "A's sandbox to await its upload", func() bool {
		sb, err := a.GetSandbox(ctx, waiting.ID)
		return err == nil && strings.Contains(sb.StateReason, "waiting for the source upload")
	})

	aCtx, aCancel := context.WithCancel(ctx)
	defer aCancel()
	done := make(chan result, 3)
	var trickles []*trickle
	var wg sync.WaitGroup
	start := func(what string, first []byte, send func(io.Reader) error) {
		tr, body := newTrickle(first)
		trickles = append(trickles, tr)
		wg.Go(func() { done <- result{what, send(body)} })
	}
	start("import", []byte("not yet an image archive"), func(r io.Reader) error {
		_, err := a.ImportImage(aCtx, "a-slow-"+e2etest.RunID(), nil, r)
		return err
	})
	start("asset", []byte("not yet a tar"), func(r io.Reader) error {
		_, err := a.CreateAsset(aCtx, "a-slow", r)
		return err
	})
	start("source upload", []byte("not yet a tar"), func(r io.Reader) error {
		_, err := a.UploadSource(aCtx, waiting.ID, r)
		return err
	})
	// A's import and asset are being received once their files exist.
	waitFor(t, "A's import and asset to be received", func() bool {
		n := 0
		for _, f := range s.leftovers(t) {
			if st, err := os.Stat(f); err == nil && (st.Size() > 0 || st.IsDir()) {
				n++
			}
		}
		return n >= 2
	})

	teamBCalls(ctx, t, b, bImg.Name, bGone.ID, "team A trickles")
	select {
	case r := <-done:
		t.Fatalf("A's %s ended (%v) before B's calls did: the test did not hold it open", r.what, r.err)
	default:
	}

	for _, tr := range trickles {
		tr.Stop()
	}
	wg.Wait()
	close(done)
	for r := range done {
		if r.err == nil {
			t.Errorf("A's %s succeeded; it was cut", r.what)
		}
	}
	waitFor(t, "A's uploads to leave nothing behind", func() bool { return len(s.leftovers(t)) == 0 })
}

// unpacking lists the trees of imports being unpacked: a staging
// directory's, or (as before imports were staged) the one beside the
// final place.
func (s server) unpacking() []string {
	var out []string
	for _, pat := range []string{
		filepath.Join(s.imagesDir, "v2", ".upload-*", "tree", "rootfs"),
		filepath.Join(s.imagesDir, "v2", ".sha256-*.tmp-*", "rootfs"),
	} {
		m, _ := filepath.Glob(pat)
		out = append(out, m...)
	}
	return out
}

// manyFiles is a layer of n empty files in directories of 1000: a small
// archive whose unpacking takes a while.
func manyFiles(t *testing.T, n int) v1.Layer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for i := range n {
		if i%1000 == 0 {
			tw.WriteHeader(&tar.Header{Name: fmt.Sprintf("many/%d/", i/1000), Mode: 0o755, Typeflag: tar.TypeDir, Format: tar.FormatUSTAR})
		}
		tw.WriteHeader(&tar.Header{Name: fmt.Sprintf("many/%d/%d", i/1000, i), Mode: 0o644, Typeflag: tar.TypeReg, Format: tar.FormatUSTAR})
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestNoTeamStallsOnUnpack: while team A's import of a large image is
// being verified and unpacked (its tree exists and grows, A has no
// answer), team B creates a sandbox from its own image, deletes an image
// and submits a workload, each to its end, and A's import is still
// unanswered when B is done. A's import then succeeds, stored once.
func TestNoTeamStallsOnUnpack(t *testing.T) {
	s := startServer(t)
	a, b := s.team(t, "unpack-a"), s.team(t, "unpack-b")
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	bImg, err := importFile(ctx, t, b, "b-own-"+e2etest.RunID(), busyboxArchive(t))
	if err != nil {
		t.Fatal(err)
	}
	bGone, err := importFile(ctx, t, b, "b-gone-"+e2etest.RunID(), busyboxArchive(t, it.File("gone", "x", 0o644)))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "large.tar")
	it.OCIArchive(t, it.Image(t, v1.Config{}, it.Busybox(t, false, "", ""), manyFiles(t, unpackFiles)), path, nil)

	aName := "a-large-" + e2etest.RunID()
	aDone := make(chan error, 1)
	var aImg api.Image
	go func() {
		var err error
		aImg, err = importFile(ctx, t, a, aName, path)
		aDone <- err
	}()
	waitFor(t, "A's import to be unpacking", func() bool { return len(s.unpacking()) > 0 })

	teamBCalls(ctx, t, b, bImg.Name, bGone.ID, "team A's import unpacks")
	select {
	case err := <-aDone:
		t.Fatalf("A's import answered (%v) before B's calls did: they waited for its unpacking", err)
	default:
	}
	if len(s.unpacking()) == 0 {
		t.Errorf("A's import is no longer unpacking when B is done, yet it has not answered")
	}

	if err := <-aDone; err != nil {
		t.Fatalf("A's import: %v", err)
	}
	if aImg.SizeBytes == 0 || aImg.Digest == "" {
		t.Errorf("A's image: %+v", aImg)
	}
	tree := filepath.Join(s.imagesDir, "v2", strings.Replace(aImg.Digest, ":", "-", 1), "rootfs", "many", "0", "0")
	if _, err := os.Stat(tree); err != nil {
		t.Errorf("A's tree: %v", err)
	}
	if l := s.leftovers(t); len(l) > 0 {
		t.Errorf("left behind: %v", l)
	}
}

// unpackFiles is how many files A's large image has: enough that its
// unpacking outlasts B's three calls many times over.
const unpackFiles = 100000

// tarOf is a tar of one file of size random bytes (incompressible).
func tarOf(t *testing.T, size int) []byte {
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

// bomb is a tar.gz of one file of size zeros: a few hundred kilobytes.
func bomb(t *testing.T, size int64) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	tw := tar.NewWriter(zw)
	tw.WriteHeader(&tar.Header{Name: "zeros", Mode: 0o644, Size: size, Typeflag: tar.TypeReg})
	zero := make([]byte, 1<<20)
	for n := int64(0); n < size; n += int64(len(zero)) {
		tw.Write(zero[:min(int64(len(zero)), size-n)])
	}
	tw.Close()
	zw.Close()
	return buf.Bytes()
}

// post sends body to path as the team's key on a connection of its own
// and returns the status, the error if any and the headers.
func post(ctx context.Context, s server, key, path string, body io.Reader) (int, *api.Error, http.Header, error) {
	req, err := http.NewRequestWithContext(ctx, "POST", s.URL+path, body)
	if err != nil {
		return 0, nil, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	var er api.ErrorResponse
	json.NewDecoder(resp.Body).Decode(&er)
	return resp.StatusCode, er.Error, resp.Header, nil
}

func lastKey(s server) string {
	keys := s.Keys()
	return keys[len(keys)-1]
}

func wantCode(t *testing.T, err error, code api.Code, says string) {
	t.Helper()
	var e *api.Error
	if !errors.As(err, &e) || e.Code != code || !strings.Contains(e.Message, says) {
		t.Fatalf("error %v; want %s saying %q", err, code, says)
	}
}

// TestUploadLimits: a team's open uploads, their idle time, its asset and
// image bytes, and how far its archives expand are bounded, each refusal
// clear and leaving nothing behind.
func TestUploadLimits(t *testing.T) {
	const assetCap = 20 << 20
	s := startServer(t, e2etest.WithArgs("--max-uploads-per-team", "10", "--upload-idle-timeout", "3s",
		"--max-team-asset-bytes", "20971520", "--max-image-bytes-per-team", "8388608"))

	t.Run("idle upload cut", func(t *testing.T) {
		c := s.team(t, "idle")
		pr, pw := io.Pipe()
		defer pw.Close()
		go pw.Write([]byte("a few bytes, then nothing"))
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()
		// Past the bound the test stops waiting: the body ends, so that
		// the call returns whatever the server does.
		defer context.AfterFunc(ctx, func() { pw.CloseWithError(ctx.Err()) })()
		_, err := c.CreateAsset(ctx, "idle", pr)
		wantCode(t, err, api.CodeInvalidArgument, "sent nothing for 3s")
		waitFor(t, "no leftovers", func() bool { return len(s.leftovers(t)) == 0 })
	})

	t.Run("open uploads per team", func(t *testing.T) {
		s.team(t, "slots")
		key := lastKey(s)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		var wg sync.WaitGroup
		var trickles []*trickle
		for range 10 {
			tr, body := newTrickle([]byte{0})
			trickles = append(trickles, tr)
			wg.Go(func() {
				st, e, _, err := post(ctx, s, key, "/v1/assets", body)
				if os.Getenv("DUMP") != "" {
					t.Logf("upload: %d %+v %v", st, e, err)
				}
			})
		}
		waitFor(t, "10 open uploads", func() bool {
			m, _ := filepath.Glob(filepath.Join(s.DataDir, "assets", "*", ".part-*"))
			return len(m) == 10
		})
		status, e, h, err := post(t.Context(), s, key, "/v1/assets", bytes.NewReader(tarOf(t, 1024)))
		if err != nil {
			t.Fatal(err)
		}
		if status != http.StatusTooManyRequests || e == nil || e.Code != api.CodeResourceExhausted || h.Get("Retry-After") == "" {
			t.Fatalf("an 11th upload: %d %+v (Retry-After %q); want 429 resource_exhausted with Retry-After", status, e, h.Get("Retry-After"))
		}
		// Another team is not held back by this one's uploads.
		if _, err := s.team(t, "slots-other").CreateAsset(t.Context(), "", bytes.NewReader(tarOf(t, 1024))); err != nil {
			t.Fatalf("another team's upload: %v", err)
		}
		for _, tr := range trickles {
			tr.Stop()
		}
		wg.Wait()
		waitFor(t, "no leftovers", func() bool { return len(s.leftovers(t)) == 0 })
	})

	t.Run("parallel assets past the cap", func(t *testing.T) {
		s.team(t, "assetcap")
		key := lastKey(s)
		var wg sync.WaitGroup
		var mu sync.Mutex
		var stored int64
		var refused []*api.Error
		bodies := make([][]byte, 10)
		for i := range bodies {
			bodies[i] = tarOf(t, 4<<20)
		}
		release := make(chan struct{})
		for i := range bodies {
			pr, pw := io.Pipe()
			wg.Go(func() {
				// A byte first: every upload is open before any sends the rest.
				pw.Write(bodies[i][:1])
				<-release
				pw.Write(bodies[i][1:])
				pw.Close()
			})
			wg.Go(func() {
				status, e, _, err := post(t.Context(), s, key, "/v1/assets", pr)
				pr.CloseWithError(errors.New("done"))
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err != nil:
					t.Errorf("upload: %v", err)
				case status == http.StatusCreated:
					stored += 4 << 20
				default:
					refused = append(refused, e)
				}
			})
		}
		waitFor(t, "10 open uploads", func() bool {
			m, _ := filepath.Glob(filepath.Join(s.DataDir, "assets", "*", ".part-*"))
			return len(m) == 10
		})
		close(release)
		wg.Wait()
		if stored > assetCap || len(refused) == 0 {
			t.Fatalf("10 uploads of 4 MiB under a 20 MiB cap: %d bytes stored, %d refused", stored, len(refused))
		}
		for _, e := range refused {
			if e == nil || e.Code != api.CodeInsufficientStorage || !strings.Contains(e.Message, "delete assets") {
				t.Fatalf("a refused upload: %+v; want insufficient_storage saying to delete assets", e)
			}
		}
		var st unix.Statfs_t
		if err := unix.Statfs(s.DataDir, &st); err != nil {
			t.Fatal(err)
		}
		if free := int64(st.Bavail) * st.Bsize; free < 1024<<20 {
			t.Fatalf("%d MiB free on the data disk, less than the reserve", free>>20)
		}
		waitFor(t, "no leftovers", func() bool { return len(s.leftovers(t)) == 0 })
	})

	t.Run("image bytes per team", func(t *testing.T) {
		c := s.team(t, "imgcap")
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()
		if _, err := importFile(ctx, t, c, "small-"+e2etest.RunID(), busyboxArchive(t)); err != nil {
			t.Fatalf("an image under the cap: %v", err)
		}
		big := busyboxArchive(t, it.Entry{Name: "big", Type: tar.TypeReg, Mode: 0o644, Body: string(tarOf(t, 8<<20))})
		_, err := importFile(ctx, t, c, "big-"+e2etest.RunID(), big)
		wantCode(t, err, api.CodeInsufficientStorage, "delete images")
		waitFor(t, "no leftovers", func() bool { return len(s.leftovers(t)) == 0 })
	})

	t.Run("decompression bombs", func(t *testing.T) {
		c := s.team(t, "bombs")
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
		defer cancel()
		b := bomb(t, 256<<20)
		_, err := c.CreateAsset(ctx, "bomb", bytes.NewReader(b))
		wantCode(t, err, api.CodePayloadTooLarge, "decompression bomb")

		sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Source: &api.Source{Type: api.SourceUpload}}, false)
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.UploadSource(ctx, sb.ID, bytes.NewReader(b))
		wantCode(t, err, api.CodePayloadTooLarge, "decompression bomb")

		zeros := it.Layer(t, it.Entry{Name: "zeros", Type: tar.TypeReg, Mode: 0o644, Body: string(make([]byte, 256<<20))})
		path := filepath.Join(t.TempDir(), "bomb.tar")
		it.OCIArchive(t, it.Image(t, v1.Config{}, it.Busybox(t, false, "", ""), zeros), path, nil)
		_, err = importFile(ctx, t, c, "bomb-"+e2etest.RunID(), path)
		wantCode(t, err, api.CodePayloadTooLarge, "decompression bomb")
		waitFor(t, "no leftovers", func() bool { return len(s.leftovers(t)) == 0 })
	})
}

// randomTar streams a tar of one file of size random bytes.
func randomTar(size int64) io.Reader {
	pr, pw := io.Pipe()
	go func() {
		tw := tar.NewWriter(pw)
		tw.WriteHeader(&tar.Header{Name: "blob", Mode: 0o644, Size: size, Typeflag: tar.TypeReg})
		_, err := io.Copy(tw, io.LimitReader(rand.Reader, size))
		if err == nil {
			err = tw.Close()
		}
		pw.CloseWithError(err)
	}()
	return pr
}

// TestUploadsFitTheDataDisk: ten parallel uploads that together are
// larger than the data disk's free space less its reserve: those that do
// not fit are refused clearly, the disk keeps its reserve, and nothing of
// the refused ones is left.
func TestUploadsFitTheDataDisk(t *testing.T) {
	const reserveMiB = 64
	mnt := e2etest.SmallDisk(t, 320)
	s := startServer(t, e2etest.WithDataDir(filepath.Join(mnt, "data")),
		e2etest.WithArgs("--disk-overcommit", "1", "--disk-reserve-mib", fmt.Sprint(reserveMiB), "--max-uploads-per-team", "10"))
	s.team(t, "disk")
	key := lastKey(s)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var stored int
	var refused []*api.Error
	for range 10 {
		wg.Go(func() {
			status, e, _, err := post(t.Context(), s, key, "/v1/assets", randomTar(40<<20))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				t.Errorf("upload: %v", err)
			case status == http.StatusCreated:
				stored++
			default:
				refused = append(refused, e)
			}
		})
	}
	wg.Wait()
	var st unix.Statfs_t
	if err := unix.Statfs(s.DataDir, &st); err != nil {
		t.Fatal(err)
	}
	free := int64(st.Bavail) * st.Bsize
	t.Logf("%d uploads of 40 MiB stored, %d refused, %d MiB free", stored, len(refused), free>>20)
	for _, e := range refused {
		if e == nil || e.Code != api.CodeResourceExhausted || !strings.Contains(e.Message, "no room for the upload") {
			t.Fatalf("a refused upload: %+v; want resource_exhausted saying the disk has no room", e)
		}
	}
	if len(refused) == 0 || stored == 0 {
		t.Fatalf("10 uploads of 40 MiB on a 320 MiB data disk: %d stored, %d refused", stored, len(refused))
	}
	if free < reserveMiB<<20 {
		t.Fatalf("%d MiB free on the data disk, less than its %d MiB reserve", free>>20, reserveMiB)
	}
	waitFor(t, "no leftovers", func() bool { return len(s.leftovers(t)) == 0 })
}

// teamBCalls runs team B's create from its own image, the delete of
// another of its images and a workload submit at once, and fails the test
// with each that did not succeed while (what team A is doing).
func teamBCalls(ctx context.Context, t *testing.T, b *cove.Client, image, gone, while string) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	wg.Go(func() {
		sb, err := b.CreateSandbox(ctx, api.CreateSandboxRequest{Template: image}, true)
		if err == nil && sb.State != api.StateRunning {
			err = errors.New("B's sandbox is " + string(sb.State) + ": " + sb.StateReason)
		}
		errs <- err
	})
	wg.Go(func() { errs <- b.DeleteImage(ctx, gone) })
	wg.Go(func() {
		_, err := b.SubmitWorkload(ctx, api.CreateWorkloadRequest{Image: image, Command: "true", Resources: &api.WorkloadResourcesRequest{}})
		errs <- err
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("team B while %s: %v", while, err)
		}
	}
}
