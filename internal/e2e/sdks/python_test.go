// Package sdks runs the Python SDK's tests (and, beside them, its
// examples) against a real `cove serve`, as make test does: the SDK is
// installed the way its README says, into a virtual environment over the
// system's packages (Debian's httpx, websockets and pytest).
package sdks

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/e2e/e2etest"
)

func TestMain(m *testing.M) { e2etest.Main(m) }

// python is Debian's interpreter, whose packages the SDK runs on; another
// one first on PATH (a version manager's) would not have them.
const python = "/usr/bin/python3"

func repoRoot(t *testing.T) string {
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// venv builds the SDK as a user's pip would get it, a wheel and an sdist
// (Debian's python3-build, --no-isolation: there is no package index
// here), from a copy of its folder so that the build leaves nothing in the
// tree, and installs the wheel alone into a fresh virtual environment over
// the system's packages (Debian's httpx, websockets and pathspec). It
// answers the environment's python.
func venv(t *testing.T) string {
	if _, err := os.Stat(python); err != nil {
		t.Skip("no " + python)
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	run(t, "", nil, "cp", "-r", filepath.Join(repoRoot(t), "sdk", "python"), src)
	// A build/ left by a hand install would be reused as it is.
	for _, d := range []string{"build", "dist", "src/cove_sdk.egg-info"} {
		os.RemoveAll(filepath.Join(src, d))
	}
	dist := filepath.Join(dir, "dist")
	run(t, "", nil, python, "-m", "build", "--no-isolation", "--wheel", "--sdist", "--outdir", dist, src)
	wheels, _ := filepath.Glob(filepath.Join(dist, "cove_sdk-*-py3-none-any.whl"))
	sdists, _ := filepath.Glob(filepath.Join(dist, "cove_sdk-*.tar.gz"))
	if len(sdists) == 0 {
		// setuptools before 69 names the sdist after the project as written.
		sdists, _ = filepath.Glob(filepath.Join(dist, "cove-sdk-*.tar.gz"))
	}
	if len(wheels) != 1 || len(sdists) != 1 {
		entries, _ := os.ReadDir(dist)
		t.Fatalf("want one wheel and one sdist in %s, got %v", dist, entries)
	}
	checkSdist(t, sdists[0])
	env := filepath.Join(dir, "venv")
	run(t, "", nil, python, "-m", "venv", "--system-site-packages", env)
	run(t, "", nil, filepath.Join(env, "bin", "pip"), "install", "-q", "--no-index", "--no-deps", wheels[0])
	return filepath.Join(env, "bin", "python")
}

// checkSdist makes sure the sdist holds what building from it needs: the
// project file, the README and the sources, the generated client included.
func checkSdist(t *testing.T, path string) {
	t.Helper()
	out, err := exec.Command("tar", "-tzf", path).Output()
	if err != nil {
		t.Fatalf("tar -tzf %s: %v", path, err)
	}
	for _, want := range []string{"/pyproject.toml", "/README.md", "/src/cove/aio.py", "/src/cove/client.py", "/src/cove/py.typed"} {
		if !bytes.Contains(out, []byte(want+"\n")) {
			t.Errorf("sdist %s has no %s:\n%s", filepath.Base(path), want, out)
		}
	}
}

func run(t *testing.T, dir string, env []string, name string, args ...string) {
	t.Helper()
	runFor(t, 10*time.Minute, dir, env, name, args...)
}

// runFor is run with a bound of its own: a suite that hangs fails within
// d, with what it printed, and its servers are cleaned up.
func runFor(t *testing.T, d time.Duration, dir string, env []string, name string, args ...string) {
	t.Helper()
	// A hung test fails here, with what it printed, rather than at the
	// package's timeout.
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	// At the bound the whole group goes (npm's node runner too), and
	// Wait does not wait on pipes a leftover child holds.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out.String())
	}
	t.Logf("%s %v:\n%s", filepath.Base(name), args, out.String())
}

// TestPythonSDK runs the SDK's tests against the installed wheel and a
// real server.
func TestPythonSDK(t *testing.T) {
	s := e2etest.StartServer(t, e2etest.WithManaged)
	pytest(t, 10*time.Minute, venv(t), s.URL, s.AdminKey)
}

// pytest runs the SDK's tests with py against the server at url, from a
// folder of their own, so that nothing but the installed package answers
// `import cove` (test_package.py checks that it is the installed one).
func pytest(t *testing.T, d time.Duration, py, url, key string) {
	t.Helper()
	root := repoRoot(t)
	tests := filepath.Join(root, "sdk", "python", "tests")
	env := []string{"COVE_URL=" + url, "COVE_API_KEY=" + key, "PYTHONDONTWRITEBYTECODE=1",
		"COVE_SDK_INSTALLED=1", "COVE_SDK_TESTDATA=" + filepath.Join(root, "sdk", "testdata")}
	runFor(t, d, t.TempDir(), env, py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", tests, tests)
}

// TestPythonExample runs every program of examples/python as a user
// would, against the installed wheel; each exits non-zero when what it
// shows did not happen.
func TestPythonExample(t *testing.T) {
	s := e2etest.StartServer(t, e2etest.WithManaged)
	py := venv(t)
	env := []string{"COVE_URL=" + s.URL, "COVE_API_KEY=" + s.AdminKey, "PYTHONDONTWRITEBYTECODE=1"}
	dir := filepath.Join(repoRoot(t), "examples", "python")
	examples, err := filepath.Glob(filepath.Join(dir, "*.py"))
	if err != nil || len(examples) < 6 {
		t.Fatalf("examples in %s: %v %v", dir, examples, err)
	}
	for _, example := range examples {
		t.Run(filepath.Base(example), func(t *testing.T) {
			run(t, dir, env, py, example)
		})
	}
}
