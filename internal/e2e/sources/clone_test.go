package sources

import (
	"encoding/base64"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
)

// asNobody runs a shell script as the host's nobody (65534, no groups)
// and returns its combined output and whether it succeeded.
func asNobody(t *testing.T, script string, args ...string) (string, bool) {
	t.Helper()
	cmd := exec.Command("sh", append([]string{"-c", script, "sh"}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}}
	cmd.Dir = "/"
	out, err := cmd.CombinedOutput()
	return string(out), err == nil
}

// countInEnvirons is a script that prints how many environments of the
// host's processes it can read hold the pattern in the file $1.
const countInEnvirons = `n=0; for f in /proc/[0-9]*/environ; do { tr '\0' '\n' < "$f" | grep -q -F -f "$1" && n=$((n+1)); } 2>/dev/null; done; echo $n`

// TestCloneApartFromHostUsers: while a clone with auth_secret runs, the
// host's nobody finds the token in no process's environment (root, the
// control, finds it in git's) and can write nothing of the clone; a
// repository whose files are symlinks to host files brings the links
// alone into the sandbox.
func TestCloneApartFromHostUsers(t *testing.T) {
	root, shas := gitRepos(t)
	// links.git: a link inside the tree; hostlinks.git: a file and a
	// folder that are links to host paths.
	outside := t.TempDir()
	os.WriteFile(filepath.Join(outside, "host-secret"), []byte("host-file-6d2f\n"), 0o644)
	for name, links := range map[string]map[string]string{
		"links.git":     {"a-link": "a.txt"},
		"hostlinks.git": {"file-link": filepath.Join(outside, "host-secret"), "dir-link": outside},
	} {
		work := t.TempDir()
		gitCmd(t, work, "init", "-q", "-b", "main")
		os.WriteFile(filepath.Join(work, "a.txt"), []byte("one\n"), 0o644)
		for l, target := range links {
			os.Symlink(target, filepath.Join(work, l))
		}
		gitCmd(t, work, "add", ".")
		gitCmd(t, work, "commit", "-qm", "links")
		gitCmd(t, root, "clone", "-q", "--bare", work, name)
	}

	// The first fetch of private.git waits until the test lets it go:
	// git is then running with the token.
	arrived, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	backend := gitBackend(t, root)
	host := e2etest.StartTestHost(t)
	host.ServeHTTP(t, host.Addr.String()+":80", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && strings.HasPrefix(r.URL.Path, "/private.git/") {
			if _, pw, _ := r.BasicAuth(); pw == privateToken {
				once.Do(func() {
					close(arrived)
					<-release
				})
			}
		}
		backend.ServeHTTP(w, r)
	}))
	var releaseOnce sync.Once
	letGo := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(letGo)
	s := e2etest.StartServer(t, e2etest.WithArgs("--warm-pool", "0", "--dns-static", "git.test="+host.Addr.String()))
	c := s.Admin
	if out, ok := asNobody(t, `cat "$1" >/dev/null`, s.ReadyFile()); !ok {
		t.Fatalf("nobody cannot read the ready file, so this test proves nothing: %s", out)
	}

	t.Run("private with auth_secret", func(t *testing.T) {
		if _, err := c.PutSecret(t.Context(), "git-token", privateToken); err != nil {
			t.Fatal(err)
		}
		type result struct {
			sb  api.Sandbox
			err error
		}
		done := make(chan result, 1)
		go func() {
			sb, err := c.CreateSandbox(t.Context(), api.CreateSandboxRequest{Source: &api.Source{Type: api.SourceGit,
				URL: "http://git.test/private.git", Ref: "main", AuthSecret: "git-token"}}, true)
			done <- result{sb, err}
		}()
		defer func() { letGo(); <-done }()
		select {
		case <-arrived:
		case r := <-done:
			t.Fatalf("the clone ended before it fetched: %s (%s), %v", r.sb.State, r.sb.StateReason, r.err)
		case <-time.After(2 * time.Minute):
			t.Fatal("the clone never fetched")
		}
		// The token and the header git sends it in, one a line, in a file
		// nobody reads.
		patDir, err := os.MkdirTemp("/var/tmp", "cove-clone-pat-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(patDir) })
		os.Chmod(patDir, 0o755)
		pat := filepath.Join(patDir, "pat")
		cred := base64.StdEncoding.EncodeToString([]byte("x-access-token:" + privateToken))
		os.WriteFile(pat, []byte(privateToken+"\n"+cred+"\n"), 0o644)
		// The controls: root finds the token in git's environment; nobody
		// finds it in the environment of a process of its own.
		out, err := exec.Command("sh", "-c", countInEnvirons, "sh", pat).CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) == "0" {
			t.Fatalf("root finds the token in no environment while git fetches, so this test proves nothing: %q %v", out, err)
		}
		own := exec.Command("sleep", "600")
		own.Env = []string{"CONTROL=" + privateToken}
		own.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}}
		if err := own.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { own.Process.Kill(); own.Wait() }()
		if out, _ := asNobody(t, countInEnvirons, pat); strings.TrimSpace(out) != "1" {
			t.Errorf("as nobody, the token is in %s processes' environments; want 1 (nobody's own control)", strings.TrimSpace(out))
		}
		var trees []string
		filepath.WalkDir(filepath.Join(s.DataDir, "git"), func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() && d.Name() == ".git" {
				trees = append(trees, filepath.Dir(p))
				return filepath.SkipDir
			}
			return nil
		})
		if len(trees) != 1 {
			t.Fatalf("clone trees on the node: %v; want one", trees)
		}
		tree := trees[0]
		if out, _ := asNobody(t, `find "$1" -writable 2>/dev/null`, filepath.Join(s.DataDir, "git")); out != "" {
			t.Errorf("as nobody, writable in the clone:\n%s", out)
		}
		if out, ok := asNobody(t, `touch "$1/.git/config" || mkdir "$1/x" || ls "$1"`, tree); ok {
			t.Errorf("as nobody, the clone tree was reached: %q", out)
		}
		letGo()
		r := <-done
		done <- r // for the deferred wait
		if r.err != nil || r.sb.State != api.StateRunning || r.sb.Source.Digest != shas["main"] {
			t.Fatalf("private clone: %s (%s), digest %q, %v", r.sb.State, r.sb.StateReason, r.sb.Source.Digest, r.err)
		}
	})

	// Links travel as links: one inside the tree lands; links to host
	// paths are refused by the sandbox's extraction as the links they are,
	// and no host file's bytes travel.
	t.Run("links stay links", func(t *testing.T) {
		sb, err := c.CreateSandbox(t.Context(), api.CreateSandboxRequest{Source: &api.Source{Type: api.SourceGit, URL: "http://git.test/links.git"}}, true)
		if err != nil {
			t.Fatal(err)
		}
		if sb.State != api.StateRunning {
			t.Fatalf("sandbox: %s (%s)", sb.State, sb.StateReason)
		}
		out := e2etest.MustOK(t, c, sb.ID, "cd /workspace && readlink a-link && find . -path ./.git -prune -o -type l -print | wc -l")
		if out != "a.txt\n1\n" {
			t.Fatalf("inside: %q", out)
		}
		sb, err = c.CreateSandbox(t.Context(), api.CreateSandboxRequest{Source: &api.Source{Type: api.SourceGit, URL: "http://git.test/hostlinks.git"}}, true)
		if err != nil {
			t.Fatal(err)
		}
		if sb.State != api.StateFailed || !strings.Contains(sb.StateReason, "is a symlink to the absolute path") {
			t.Fatalf("host links: %s (%q); want failed: links refused as links", sb.State, sb.StateReason)
		}
		if strings.Contains(s.Tail(1<<30), "host-file-6d2f") {
			t.Fatal("a host file's bytes reached the server's output")
		}
	})
	if left, _ := filepath.Glob(filepath.Join(s.DataDir, "git", "*")); len(left) != 0 {
		t.Fatalf("left on the node: %v", left)
	}
}

// TestCloneSizeCap: a repository whose one file is 2 GiB of zeros (a pack
// of a few MiB, checked out as a sparse file) fails the sandbox, saying
// the cap, and leaves nothing on the node; the node's disk stays above
// its reserve; a clone within the cap lands; a node that cannot hold a
// clone of the cap refuses it.
func TestCloneSizeCap(t *testing.T) {
	root, shas := gitRepos(t)
	work := t.TempDir()
	gitCmd(t, work, "init", "-q", "-b", "main")
	f, err := os.Create(filepath.Join(work, "zeros"))
	if err != nil {
		t.Fatal(err)
	}
	f.Truncate(2 << 30) // sparse: no disk of the test's own
	f.Close()
	gitCmd(t, work, "-c", "core.compression=1", "add", "zeros")
	gitCmd(t, work, "commit", "-qm", "zeros")
	gitCmd(t, root, "clone", "-q", "--bare", work, "zeros.git")
	os.RemoveAll(work)

	host := e2etest.StartTestHost(t)
	host.ServeHTTP(t, host.Addr.String()+":80", gitBackend(t, root))
	const reserveMiB = 1024
	s := e2etest.StartServer(t, e2etest.WithArgs("--warm-pool", "0", "--dns-static", "git.test="+host.Addr.String(),
		"--max-clone-bytes", "67108864", "--disk-reserve-mib", "1024"))
	c := s.Admin

	t.Run("2 GiB of zeros", func(t *testing.T) {
		sb, err := c.CreateSandbox(t.Context(), api.CreateSandboxRequest{Source: &api.Source{Type: api.SourceGit, URL: "http://git.test/zeros.git"}}, true)
		if err != nil {
			t.Fatal(err)
		}
		if sb.State != api.StateFailed || !strings.Contains(sb.StateReason, "clone size cap of 64 MiB (--max-clone-bytes)") {
			t.Fatalf("sandbox: %s (%q); want failed naming the cap", sb.State, sb.StateReason)
		}
		var st unix.Statfs_t
		if err := unix.Statfs(s.DataDir, &st); err != nil {
			t.Fatal(err)
		}
		if free := int64(st.Bavail) * st.Bsize; free < reserveMiB<<20 {
			t.Errorf("the data disk has %d MiB free, below the reserve", free>>20)
		}
	})
	t.Run("within the cap", func(t *testing.T) {
		sb, err := c.CreateSandbox(t.Context(), api.CreateSandboxRequest{Source: &api.Source{Type: api.SourceGit, URL: "http://git.test/public.git"}}, true)
		if err != nil {
			t.Fatal(err)
		}
		if sb.State != api.StateRunning || sb.Source.Digest != shas["main"] {
			t.Fatalf("sandbox: %s (%s), digest %q", sb.State, sb.StateReason, sb.Source.Digest)
		}
	})
	// Nothing of the clones stays: no files, no mounts, no loop devices.
	gitDir := filepath.Join(s.DataDir, "git")
	if left, _ := filepath.Glob(filepath.Join(gitDir, "*")); len(left) != 0 {
		t.Errorf("left on the node: %v", left)
	}
	if mi, err := os.ReadFile("/proc/self/mountinfo"); err != nil {
		t.Error(err)
	} else if strings.Contains(string(mi), gitDir+"/") {
		t.Errorf("a clone's mount is left:\n%s", mi)
	}
	backing, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, p := range backing {
		if b, _ := os.ReadFile(p); strings.HasPrefix(string(b), gitDir+"/") {
			t.Errorf("a loop device is left: %s backed by %s", p, b)
		}
	}

	// Admission counts the clone: a node whose data disk cannot hold a
	// clone of the cap refuses it.
	t.Run("admitted like a disk", func(t *testing.T) {
		s := e2etest.StartServer(t, e2etest.WithArgs("--warm-pool", "0", "--dns-static", "git.test="+host.Addr.String(),
			"--max-clone-bytes", "70368744177664")) // 64 TiB
		sb, err := s.Admin.CreateSandbox(t.Context(), api.CreateSandboxRequest{Source: &api.Source{Type: api.SourceGit, URL: "http://git.test/public.git"}}, true)
		if err != nil {
			t.Fatal(err)
		}
		if sb.State != api.StateFailed || !strings.Contains(sb.StateReason, "no room") {
			t.Fatalf("sandbox: %s (%q); want failed: no room for the clone", sb.State, sb.StateReason)
		}
	})
}
