// Package sources tests a sandbox's source against a real `cove serve`:
// a local folder sent with `cove create --from`, assets, git; and what is
// refused (bad archives, bad fields) leaves nothing behind.
package sources

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
	cove "github.com/cove-dev/cove/sdk/go"
)

func TestMain(m *testing.M) { e2etest.Main(m) }

// cli runs the cove binary as the server's admin (its HOME has the config).
func cli(t testing.TB, s *e2etest.Server, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(filepath.Join(e2etest.BinDir(), "cove"), args...)
	cmd.Env = append(os.Environ(), "HOME="+s.Home, "COVE_URL=", "COVE_API_KEY=")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("cove %v: %v", args, err)
	}
	return stdout.String(), stderr.String(), code
}

// manifestCmd lists a tree as `find` does below: type, permission bits,
// path, link target; then the sha-256 of every file. The test computes
// the same text for the local folder.
const manifestCmd = `cd /workspace && find . -mindepth 1 -printf '%y %m %p %l\n' | LC_ALL=C sort && ` +
	`find . -type f -print0 | LC_ALL=C sort -z | xargs -0 -r sha256sum`

func localManifest(t *testing.T, dir string, skip func(rel string) bool) string {
	t.Helper()
	var lines, sums []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if skip(rel) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		typ, link := "f", ""
		switch {
		case fi.IsDir():
			typ = "d"
		case fi.Mode()&fs.ModeSymlink != 0:
			typ = "l"
			link, _ = os.Readlink(p)
		default:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			h := sha256.Sum256(b)
			sums = append(sums, hex.EncodeToString(h[:])+"  ./"+rel)
		}
		lines = append(lines, fmt.Sprintf("%s %o ./%s %s", typ, fi.Mode().Perm(), rel, link))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(lines)
	slices.SortFunc(sums, func(a, b string) int { return strings.Compare(a[66:], b[66:]) })
	return strings.Join(lines, "\n") + "\n" + strings.Join(sums, "\n") + "\n"
}

// makeTree writes 5,000 small files in nested folders, an executable, an
// internal symlink, an empty folder, a 50 MiB file, and what the upload
// must leave out.
func makeTree(t *testing.T, dir string) {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	for i := range 5000 {
		p := filepath.Join(dir, fmt.Sprintf("src/pkg%02d/sub%d/f%04d.txt", i%50, i%3, i))
		must(os.MkdirAll(filepath.Dir(p), 0o755))
		must(os.WriteFile(p, []byte(fmt.Sprintf("file %d\n", i)), 0o644))
	}
	must(os.MkdirAll(filepath.Join(dir, "bin"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "bin/run.sh"), []byte("#!/bin/sh\necho ran\n"), 0o755))
	must(os.Symlink("../bin/run.sh", filepath.Join(dir, "src/run")))
	must(os.MkdirAll(filepath.Join(dir, "empty/inner"), 0o755))
	big := make([]byte, 50<<20)
	rand.Read(big)
	must(os.WriteFile(filepath.Join(dir, "data.bin"), big, 0o600))
	// Left out: by --exclude, and by the folder's .coveignore.
	must(os.WriteFile(filepath.Join(dir, "debug.log"), []byte("noise"), 0o644))
	must(os.WriteFile(filepath.Join(dir, "src/pkg01/trace.log"), []byte("noise"), 0o644))
	must(os.MkdirAll(filepath.Join(dir, "node_modules/dep"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "node_modules/dep/index.js"), []byte("x"), 0o644))
	must(os.WriteFile(filepath.Join(dir, cove.IgnoreFile), []byte("# generated\nnode_modules/\n"), 0o644))
}

// TestFolderRoundTrip sends a folder with `cove create --from` and finds
// it inside, entry for entry: types, modes, symlinks, empty folders,
// contents; owned by user; excluded paths absent.
func TestFolderRoundTrip(t *testing.T) {
	s := e2etest.StartServer(t, e2etest.WithManaged, e2etest.WithArgs("--warm-pool", "0"))
	dir := t.TempDir()
	makeTree(t, dir)
	start := time.Now()
	stdout, stderr, code := cli(t, s, "create", "--from", dir, "--exclude", "*.log", "--disk", "1024", "--json")
	took := time.Since(start)
	if code != 0 {
		t.Fatalf("create --from: exit %d: %s", code, stderr)
	}
	var sb api.Sandbox
	if err := json.Unmarshal([]byte(stdout), &sb); err != nil {
		t.Fatalf("create --json: %v: %q", err, stdout)
	}
	t.Logf("create --from of 5,000 files and 50 MiB: %v", took)
	if sb.State != api.StateRunning || sb.Source == nil || sb.Source.Type != api.SourceUpload || len(sb.Source.Digest) != 64 {
		t.Fatalf("sandbox after create --from: %+v, source %+v", sb, sb.Source)
	}
	want := localManifest(t, dir, func(rel string) bool {
		return strings.HasSuffix(rel, ".log") || rel == "node_modules"
	})
	res := e2etest.Sh(t, s.Admin, sb.ID, manifestCmd, e2etest.WithTimeout(300))
	if e2etest.ExitCode(res) != 0 || res.Truncated {
		t.Fatalf("manifest: exit %d, truncated %v: %s", e2etest.ExitCode(res), res.Truncated, res.Stderr)
	}
	if res.Stdout != want {
		got, exp := strings.Split(res.Stdout, "\n"), strings.Split(want, "\n")
		for i := range min(len(got), len(exp)) {
			if got[i] != exp[i] {
				t.Fatalf("tree inside differs at line %d: got %q, want %q (%d vs %d lines)", i, got[i], exp[i], len(got), len(exp))
			}
		}
		t.Fatalf("tree inside has %d lines, want %d", len(got), len(exp))
	}
	if n := strings.Count(want, "\n"); n < 10000 {
		t.Fatalf("manifest has only %d lines", n)
	}
	out := e2etest.MustOK(t, s.Admin, sb.ID, `cd /workspace && find . ! -user user | wc -l; ./src/run; test -e debug.log || echo no-log; test -e node_modules || echo no-modules`)
	if out != "0\nran\nno-log\nno-modules\n" {
		t.Fatalf("owners, executable, exclusions: %q", out)
	}
}

// tarGz builds an archive of hand-made entries, for archives no honest
// client writes.
func tarGz(t *testing.T, entries ...tar.Header) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, h := range entries {
		body := []byte{}
		if h.Typeflag == tar.TypeReg {
			body = []byte("content")
			h.Size = int64(len(body))
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		tw.Write(body)
	}
	tw.Close()
	zw.Close()
	return buf.Bytes()
}

// TestUploadRefused sends hostile and broken archives to a sandbox that
// awaits its source: each is refused with a clear 4xx, nothing of it
// lands, the sandbox keeps waiting, and a good archive then lands alone.
func TestUploadRefused(t *testing.T) {
	s := e2etest.StartServer(t, e2etest.WithArgs("--warm-pool", "0", "--max-source-bytes", "1048576"))
	c := s.Admin
	ctx := t.Context()
	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Source: &api.Source{Type: api.SourceUpload}}, false)
	if err != nil {
		t.Fatal(err)
	}
	// A real archive past --max-source-bytes (its file does not compress).
	var bigBuf bytes.Buffer
	bigDir := t.TempDir()
	noise := make([]byte, 2<<20)
	rand.Read(noise)
	if err := os.WriteFile(filepath.Join(bigDir, "noise"), noise, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := cove.WriteDirArchive(&bigBuf, bigDir, nil); err != nil {
		t.Fatal(err)
	}
	big := bigBuf.Bytes()
	for _, tt := range []struct {
		name string
		body []byte
		code api.Code
		msg  string
	}{
		{"dot-dot entry", tarGz(t, tar.Header{Name: "../escape", Typeflag: tar.TypeReg}), api.CodeInvalidArgument, ".."},
		{"absolute entry", tarGz(t, tar.Header{Name: "/etc/evil", Typeflag: tar.TypeReg}), api.CodeInvalidArgument, "absolute"},
		{"symlink out", tarGz(t, tar.Header{Name: "out", Typeflag: tar.TypeSymlink, Linkname: "../../etc"}), api.CodeInvalidArgument, "symlink"},
		{"through a symlink", tarGz(t, tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "/tmp"}, tar.Header{Name: "l/x", Typeflag: tar.TypeReg}), api.CodeInvalidArgument, ""},
		{"not an archive", []byte("hello"), api.CodeInvalidArgument, "not a valid tar"},
		{"oversize", big, api.CodePayloadTooLarge, "larger than 1048576"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := c.UploadSource(ctx, sb.ID, bytes.NewReader(tt.body))
			if api.ErrorCode(err) != tt.code || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("upload: %v; want %s mentioning %q", err, tt.code, tt.msg)
			}
		})
	}
	// A device node is not made: it is skipped, never created.
	good := tarGz(t,
		tar.Header{Name: "dev", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 3},
		tar.Header{Name: "keep/file", Typeflag: tar.TypeReg},
	)
	got, err := c.GetSandbox(ctx, sb.ID)
	if err != nil || got.State != api.StateCreating {
		t.Fatalf("after refused uploads: %+v, %v", got, err)
	}
	if _, err := c.UploadSource(ctx, sb.ID, bytes.NewReader(good)); err != nil {
		t.Fatal(err)
	}
	got, err = c.WaitSandbox(ctx, sb.ID, api.StateRunning, time.Minute)
	if err != nil || got.State != api.StateRunning {
		t.Fatalf("after the good upload: %+v, %v", got, err)
	}
	if out := e2etest.MustOK(t, c, sb.ID, "cd /workspace && find . -mindepth 1 | LC_ALL=C sort; ls -d /escape /etc/evil /tmp/x 2>/dev/null; true"); out != "./keep\n./keep/file\n" {
		t.Fatalf("workspace after refused and good uploads: %q", out)
	}
	// Only once: the source has landed.
	if _, err := c.UploadSource(ctx, sb.ID, bytes.NewReader(good)); err == nil {
		t.Fatal("a second source upload was taken")
	}
}

// TestCreateFromRefused: `cove create --from` that cannot finish leaves no
// live sandbox; bad source fields are refused before anything is made.
func TestCreateFromRefused(t *testing.T) {
	s := e2etest.StartServer(t, e2etest.WithArgs("--warm-pool", "0", "--max-source-bytes", "1048576"))
	dir := t.TempDir()
	big := make([]byte, 2<<20)
	rand.Read(big)
	if err := os.WriteFile(filepath.Join(dir, "big"), big, 0o644); err != nil {
		t.Fatal(err)
	}
	_, stderr, code := cli(t, s, "create", "--from", dir)
	if code == 0 || !strings.Contains(stderr, "larger than") {
		t.Fatalf("oversize create --from: exit %d: %s", code, stderr)
	}
	_, stderr, code = cli(t, s, "create", "--from", filepath.Join(dir, "missing"))
	if code == 0 || !strings.Contains(stderr, "no such file") {
		t.Fatalf("create --from a missing folder: exit %d: %s", code, stderr)
	}
	for _, tt := range []struct {
		body string
		code int
		msg  string
	}{
		{`{"source":{"type":"ftp"}}`, 400, "unknown"},
		{`{"source":{"type":"upload","url":"https://x"}}`, 400, "upload takes no other field"},
		{`{"source":{"type":"asset"}}`, 400, "asset_id"},
		{`{"source":{"type":"asset","asset_id":"ast_nope"}}`, 404, "not found"},
		{`{"source":{"type":"git","url":"https://user:token@git.example/r.git"}}`, 400, "credentials"},
		{`{"source":{"type":"upload","digest":"ab"}}`, 400, "set by the server"},
		{`{"setup":{"command":"true","secrets":{"T":"tok"}}}`, 404, "not found"},
		{`{"source":{"type":"git","url":"https://git.example/r.git","auth_secret":"nope"}}`, 404, "not found"},
	} {
		status, e, _ := e2etest.RawRequest(t, "POST", s.URL+"/v1/sandboxes", s.AdminKey, tt.body)
		if status != tt.code || !strings.Contains(e.Error.Message, tt.msg) {
			t.Errorf("%s: %d %+v; want %d mentioning %q", tt.body, status, e.Error, tt.code, tt.msg)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for {
		l, err := s.Admin.ListSandboxes(ctx, cove.SandboxQuery{})
		if err != nil {
			t.Fatal(err)
		}
		live := 0
		for _, sb := range l.Items {
			if !sb.State.Terminal() {
				live++
			}
		}
		if live == 0 {
			if len(l.Items) != 1 {
				t.Fatalf("refused creates made %d sandboxes; want only the oversize upload's, terminated", len(l.Items))
			}
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%d sandboxes still live after failed creates", live)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
