package sources

import (
	"net"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
)

func gitCmd(t *testing.T, dir string, args ...string) string {
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

// gitRepos makes public.git and private.git (the same history: main with
// two commits, the first tagged v1, and a branch feature) under a root
// the CGI git http-backend serves.
func gitRepos(t *testing.T) (root string, shas map[string]string) {
	t.Helper()
	root, work := t.TempDir(), t.TempDir()
	shas = map[string]string{}
	gitCmd(t, work, "init", "-q", "-b", "main")
	os.WriteFile(filepath.Join(work, "a.txt"), []byte("one\n"), 0o644)
	gitCmd(t, work, "add", ".")
	gitCmd(t, work, "commit", "-qm", "first")
	shas["v1"] = gitCmd(t, work, "rev-parse", "HEAD")
	gitCmd(t, work, "tag", "v1")
	os.WriteFile(filepath.Join(work, "run.sh"), []byte("#!/bin/sh\necho two\n"), 0o755)
	gitCmd(t, work, "add", ".")
	gitCmd(t, work, "commit", "-qm", "second")
	shas["main"] = gitCmd(t, work, "rev-parse", "HEAD")
	gitCmd(t, work, "checkout", "-qb", "feature")
	os.WriteFile(filepath.Join(work, "f.txt"), []byte("feature\n"), 0o644)
	gitCmd(t, work, "add", ".")
	gitCmd(t, work, "commit", "-qm", "feature")
	shas["feature"] = gitCmd(t, work, "rev-parse", "HEAD")
	gitCmd(t, work, "checkout", "-q", "main")
	gitCmd(t, root, "clone", "-q", "--bare", work, "public.git")
	gitCmd(t, root, "clone", "-q", "--bare", work, "private.git")
	return root, shas
}

// privateToken is the password private.git takes.
const privateToken = "the-token-5c1e7a9d"

func gitBackend(t *testing.T, root string) http.Handler {
	t.Helper()
	execPath := gitCmd(t, root, "--exec-path")
	h := &cgi.Handler{Path: filepath.Join(execPath, "git-http-backend"), Env: []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1"}}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/private.git") {
			if _, pw, ok := r.BasicAuth(); !ok || pw != privateToken {
				w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}

// TestGitSource clones from a git server in a test namespace by branch,
// tag and commit: the tree with its history lands in the workdir, owned
// by user, its remote without credentials; an unknown ref, a private
// repository without credentials and a name that leads to the node's
// loopback fail the sandbox with a reason saying which. (The token path
// is tested with a token passed directly in internal/sources:
// TestCloneRefs; secrets are resolved by the server's SecretResolver.)
func TestGitSource(t *testing.T) {
	root, shas := gitRepos(t)
	host := e2etest.StartTestHost(t)
	host.ServeHTTP(t, host.Addr.String()+":80", gitBackend(t, root))
	// The same repositories on the node's loopback, under a name.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	local := httptest.NewUnstartedServer(gitBackend(t, root))
	local.Listener = l
	local.Start()
	t.Cleanup(local.Close)
	s := e2etest.StartServer(t, e2etest.WithManaged, e2etest.WithArgs("--warm-pool", "0",
		"--dns-static", "git.test="+host.Addr.String(), "--dns-static", "local.test=127.0.0.1"))
	c := s.Admin
	url := "http://git.test/public.git"
	for _, tt := range []struct{ ref, want string }{
		{"feature", shas["feature"]},
		{"v1", shas["v1"]},
		{shas["v1"], shas["v1"]},
		{"", shas["main"]},
	} {
		t.Run("ref "+tt.ref, func(t *testing.T) {
			start := time.Now()
			sb, err := c.CreateSandbox(t.Context(), api.CreateSandboxRequest{Source: &api.Source{Type: api.SourceGit, URL: url, Ref: tt.ref}}, true)
			if err != nil {
				t.Fatal(err)
			}
			if sb.State != api.StateRunning || sb.Source.Digest != tt.want {
				t.Fatalf("sandbox: %s (%s), digest %q; want %s", sb.State, sb.StateReason, sb.Source.Digest, tt.want)
			}
			t.Logf("create from git at %q: %v", tt.ref, time.Since(start))
			out := e2etest.MustOK(t, c, sb.ID, "cd /workspace && git log --format=%H -1 && git remote get-url origin && git status --porcelain | wc -l && find . ! -user user | wc -l")
			if want := tt.want + "\n" + url + "\n0\n0\n"; out != want {
				t.Fatalf("inside: %q; want %q", out, want)
			}
		})
	}
	// A private repository with the token in a team secret: cloned, and
	// the token is nowhere in the sandbox (files, whole disk, every
	// process's environment, .git/config) nor in its output.
	token := privateToken
	t.Run("private with auth_secret", func(t *testing.T) {
		if _, err := c.PutSecret(t.Context(), "git-token", token); err != nil {
			t.Fatal(err)
		}
		purl := "http://git.test/private.git"
		sb, err := c.CreateSandbox(t.Context(), api.CreateSandboxRequest{Source: &api.Source{Type: api.SourceGit, URL: purl, Ref: "main", Depth: 1, AuthSecret: "git-token"}}, true)
		if err != nil {
			t.Fatal(err)
		}
		if sb.State != api.StateRunning || sb.Source.Digest != shas["main"] {
			t.Fatalf("private clone: %s (%s), digest %q", sb.State, sb.StateReason, sb.Source.Digest)
		}
		out := e2etest.MustOK(t, c, sb.ID, "cd /workspace && git log --format=%H -1 && git config --get remote.origin.url && cat .git/config | grep -c -i -e token -e extraheader -e authorization; true")
		if out != shas["main"]+"\n"+purl+"\n0\n" {
			t.Fatalf("inside: %q", out)
		}
		// Search as root: every file of the sandbox's disk and image, every
		// process's environment and command line. The pattern is written
		// in two pieces, so no command line holds it.
		hunt := "printf '%s%s' " + token[:9] + " " + token[9:] + " > /tmp/pat; " +
			"grep -r -l -a -F -f /tmp/pat / --exclude=pat --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev 2>/dev/null | head; " +
			"cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' '\\n' | grep -c -F -f /tmp/pat; true"
		res := e2etest.Sh(t, c, sb.ID, hunt, e2etest.AsRoot, e2etest.WithTimeout(600))
		if res.Stdout != "0\n" {
			t.Fatalf("the token in the sandbox: %q (stderr %q)", res.Stdout, res.Stderr)
		}
		// A wrong token fails, saying so.
		if _, err := c.PutSecret(t.Context(), "wrong-token", "not-the-token"); err != nil {
			t.Fatal(err)
		}
		sb, err = c.CreateSandbox(t.Context(), api.CreateSandboxRequest{Source: &api.Source{Type: api.SourceGit, URL: purl, AuthSecret: "wrong-token"}}, true)
		if err != nil {
			t.Fatal(err)
		}
		if sb.State != api.StateFailed || !strings.Contains(sb.StateReason, "refused the credentials") {
			t.Fatalf("wrong token: %s (%q)", sb.State, sb.StateReason)
		}
	})
	// Each fails at once, never by a timeout.
	for _, tt := range []struct{ name, url, ref, reason string }{
		{"unknown ref", url, "nope", `git ref "nope" was not found`},
		{"private without credentials", "http://git.test/private.git", "", "needs credentials"},
		{"a name for the node's loopback", "http://local.test:" + strings.TrimPrefix(local.URL, "http://127.0.0.1:") + "/public.git", "", "could not"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			sb, err := c.CreateSandbox(t.Context(), api.CreateSandboxRequest{Source: &api.Source{Type: api.SourceGit, URL: tt.url, Ref: tt.ref}}, true)
			if err != nil {
				t.Fatal(err)
			}
			if took := time.Since(start); took > time.Minute {
				t.Errorf("failing took %v", took)
			}
			if sb.State != api.StateFailed || !strings.Contains(sb.StateReason, tt.reason) {
				t.Fatalf("sandbox: %s (%q); want failed saying %q", sb.State, sb.StateReason, tt.reason)
			}
		})
	}
	// Nothing of the clones stays on the node.
	if left, _ := filepath.Glob(filepath.Join(s.DataDir, "git", "*")); len(left) != 0 {
		t.Fatalf("left on the node: %v", left)
	}
}
