package sources

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cove-dev/cove/api"
)

const testToken = "tok-3f9a1c-secret"

// gitServer serves the bare repositories under root by git's smart HTTP
// (git http-backend), to clients that send basic credentials with
// testToken as the password.
func gitServer(t *testing.T, root string) string {
	t.Helper()
	execPath, err := exec.Command("git", "--exec-path").Output()
	if err != nil {
		t.Skipf("git: %v", err)
	}
	backend := filepath.Join(strings.TrimSpace(string(execPath)), "git-http-backend")
	h := &cgi.Handler{Path: backend, Env: []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1"}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, pw, ok := r.BasicAuth(); !ok || pw != testToken {
			w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	c := exec.Command("git", args...)
	c.Dir = dir
	c.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t", "GIT_CONFIG_GLOBAL=/dev/null")
	out, err := c.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// testRepo makes repo.git with main (two commits; the first tagged v1) and
// a branch feature.
func testRepo(t *testing.T) (root string, first, second, feature string) {
	t.Helper()
	root = t.TempDir()
	work := t.TempDir()
	git(t, work, "init", "-q", "-b", "main")
	os.WriteFile(filepath.Join(work, "a.txt"), []byte("one\n"), 0o644)
	git(t, work, "add", ".")
	git(t, work, "commit", "-qm", "first")
	first = git(t, work, "rev-parse", "HEAD")
	git(t, work, "tag", "v1")
	os.WriteFile(filepath.Join(work, "a.txt"), []byte("two\n"), 0o644)
	git(t, work, "commit", "-qam", "second")
	second = git(t, work, "rev-parse", "HEAD")
	git(t, work, "checkout", "-qb", "feature")
	os.WriteFile(filepath.Join(work, "f.txt"), []byte("feature\n"), 0o644)
	git(t, work, "add", ".")
	git(t, work, "commit", "-qm", "feature")
	feature = git(t, work, "rev-parse", "HEAD")
	git(t, work, "checkout", "-q", "main")
	git(t, root, "clone", "-q", "--bare", work, "repo.git")
	return root, first, second, feature
}

func TestCloneRefs(t *testing.T) {
	root, first, second, feature := testRepo(t)
	url := gitServer(t, root) + "/repo.git"
	for _, tt := range []struct {
		name, ref string
		depth     int
		want      string
	}{
		{"default branch", "", 0, second},
		{"branch", "feature", 0, feature},
		{"tag", "v1", 0, first},
		{"commit", first, 0, first},
		{"commit shallow", second, 1, second},
		{"branch shallow", "main", 1, second},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "clone")
			got, err := Clone(t.Context(), GitSpec{URL: url, Ref: tt.ref, Depth: tt.depth, Token: testToken, Dir: dir})
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Fatalf("commit %s; want %s", got, tt.want)
			}
			if log := git(t, dir, "log", "--format=%H", "-1"); log != tt.want {
				t.Fatalf("git log in the clone: %q", log)
			}
			// The token is nowhere in the clone; its remote has no credentials.
			filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
				if err == nil && fi.Mode().IsRegular() {
					b, _ := os.ReadFile(p)
					if bytes.Contains(b, []byte(testToken)) || bytes.Contains(b, []byte("x-access-token")) {
						t.Errorf("%s holds the token", p)
					}
				}
				return nil
			})
			if remote := git(t, dir, "remote", "get-url", "origin"); remote != url {
				t.Fatalf("remote %q; want %q", remote, url)
			}
		})
	}
}

func TestCloneFailsClearly(t *testing.T) {
	root, _, _, _ := testRepo(t)
	base := gitServer(t, root)
	for _, tt := range []struct {
		name, url, ref, token, reason, msg string
	}{
		{"wrong token", base + "/repo.git", "", "wrong", "credentials", "refused the credentials"},
		{"no token", base + "/repo.git", "", "", "credentials", "needs credentials"},
		{"unknown branch", base + "/repo.git", "nope", testToken, "ref", `ref "nope" was not found`},
		{"unknown commit", base + "/repo.git", strings.Repeat("ab", 20), testToken, "ref", "was not found"},
		{"no repository", base + "/missing.git", "", testToken, "repository", "no git repository"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "clone")
			_, err := Clone(t.Context(), GitSpec{URL: tt.url, Ref: tt.ref, Token: tt.token, Dir: dir})
			e, ok := err.(*api.Error)
			if !ok || e.Details["reason"] != tt.reason || !strings.Contains(e.Message, tt.msg) {
				t.Fatalf("err = %v; want reason %s mentioning %q", err, tt.reason, tt.msg)
			}
			if strings.Contains(e.Message, testToken) || strings.Contains(e.Message, dir) {
				t.Fatalf("message leaks: %s", e.Message)
			}
		})
	}
	// A clone cut short by its context says so.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := Clone(ctx, GitSpec{URL: base + "/repo.git", Token: testToken, Dir: filepath.Join(t.TempDir(), "c")})
	if err == nil {
		t.Fatal("a cancelled clone succeeded")
	}
}

// TestClassifyNoRoom: git's words for a full disk, whichever git command
// met it, say the clone ran out of room, for the caller to name its cap.
func TestClassifyNoRoom(t *testing.T) {
	g := &gitRun{spec: GitSpec{URL: "https://git.example/r.git", Dir: "/tmp/tree"}}
	for _, stderr := range []string{
		"Cloning into '/tmp/tree'...\nfatal: write error: No space left on device\nfatal: fetch-pack: invalid index-pack output",
		"error: unable to create temporary file: No space left on device\nfatal: cannot store pack file",
		"error: unable to write file big: Disk quota exceeded",
	} {
		e, ok := g.classify(t.Context(), stderr, errors.New("exit status 128")).(*api.Error)
		if !ok || e.Details["reason"] != "space" || !strings.Contains(e.Message, "ran out of room") {
			t.Errorf("%q: %v; want reason space", stderr, e)
		}
	}
}

// TestCloneFileSizeLimit: a file past the RLIMIT_FSIZE the caller sets
// kills git while it writes it, and the clone says it ran out of room.
func TestCloneFileSizeLimit(t *testing.T) {
	if _, err := exec.LookPath("prlimit"); err != nil {
		t.Skip("no prlimit")
	}
	root := t.TempDir()
	work := t.TempDir()
	git(t, work, "init", "-q", "-b", "main")
	os.WriteFile(filepath.Join(work, "zeros"), make([]byte, 1<<20), 0o644) // a pack of a few KiB
	git(t, work, "add", ".")
	git(t, work, "commit", "-qm", "zeros")
	git(t, root, "clone", "-q", "--bare", work, "repo.git")
	base := gitServer(t, root)
	_, err := Clone(t.Context(), GitSpec{URL: base + "/repo.git", Token: testToken, Dir: filepath.Join(t.TempDir(), "c"),
		Command: func(ctx context.Context, args []string) *exec.Cmd {
			return exec.CommandContext(ctx, "prlimit", append([]string{"--fsize=65536", "--"}, args...)...)
		}})
	if e, ok := err.(*api.Error); !ok || e.Details["reason"] != "space" {
		t.Fatalf("clone of a 1 MiB file under a 64 KiB limit: %v; want reason space", err)
	}
}
