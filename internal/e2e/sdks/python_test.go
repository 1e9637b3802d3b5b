// Package sdks runs the Python SDK's tests (and, beside them, its
// examples) against a real `cove serve`, as make test does: the SDK is
// installed the way its README says, into a virtual environment over the
// system's packages (Debian's httpx, websockets and pytest).
package sdks

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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
	return venvOver(t, "")
}

// venvOver is venv with the packages of the folder site copied into the
// environment first, where they come before the system's.
func venvOver(t *testing.T, site string) string {
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
	if site != "" {
		out, err := exec.Command(filepath.Join(env, "bin", "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").Output()
		if err != nil {
			t.Fatalf("the venv's site-packages: %v", err)
		}
		run(t, "", nil, "cp", "-r", site+"/.", string(bytes.TrimSpace(out)))
	}
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
	// Whatever the program leaves in its temporary directory (pytest's
	// basetemp, an example's scratch) goes with the test.
	cmd.Env = append(append(os.Environ(), "TMPDIR="+t.TempDir()), env...)
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

// TestPythonSDKNewestDeps runs the SDK's tests again on the upper end of
// its declared ranges: httpx, websockets and pathspec as Debian's newest
// stable release ships them (scripts/pydeps-newest.sh fetches them, and
// make test runs it), in place of Debian 12's. test_package.py checks that
// the versions the tests import are the ones wanted here and inside the
// ranges the package declares.
func TestPythonSDKNewestDeps(t *testing.T) {
	dir := os.Getenv("COVE_PYDEPS_NEWEST")
	if dir == "" {
		t.Skip("COVE_PYDEPS_NEWEST unset: scripts/pydeps-newest.sh fetches the packages, make test sets it")
	}
	site := filepath.Join(dir, "site")
	if _, err := os.Stat(filepath.Join(site, ".complete")); err != nil {
		t.Fatalf("COVE_PYDEPS_NEWEST=%s holds no packages: run scripts/pydeps-newest.sh", dir)
	}
	want, err := distVersions(site)
	if err != nil {
		t.Fatal(err)
	}
	s := e2etest.StartServer(t, e2etest.WithManaged)
	pytestEnv(t, 10*time.Minute, venvOver(t, site), s.URL, s.AdminKey, "COVE_SDK_WANT_DEPS="+want)
}

// distVersions answers "name==version,…" of the distributions unpacked
// in site, from their metadata folders' names.
func distVersions(site string) (string, error) {
	var pins []string
	for _, pattern := range []string{"*.dist-info", "*.egg-info"} {
		matches, err := filepath.Glob(filepath.Join(site, pattern))
		if err != nil {
			return "", err
		}
		for _, m := range matches {
			base := strings.TrimSuffix(strings.TrimSuffix(filepath.Base(m), ".dist-info"), ".egg-info")
			name, version, ok := strings.Cut(base, "-")
			if !ok {
				return "", fmt.Errorf("%s: no version in its name", m)
			}
			pins = append(pins, name+"=="+version)
		}
	}
	if len(pins) == 0 {
		return "", fmt.Errorf("no distributions in %s", site)
	}
	return strings.Join(pins, ","), nil
}

// pytest runs the SDK's tests with py against the server at url, from a
// folder of their own, so that nothing but the installed package answers
// `import cove` (test_package.py checks that it is the installed one).
func pytest(t *testing.T, d time.Duration, py, url, key string) {
	t.Helper()
	pytestEnv(t, d, py, url, key)
}

// pytestEnv is pytest with more environment.
func pytestEnv(t *testing.T, d time.Duration, py, url, key string, more ...string) {
	t.Helper()
	root := repoRoot(t)
	tests := filepath.Join(root, "sdk", "python", "tests")
	env := []string{"COVE_URL=" + url, "COVE_API_KEY=" + key, "PYTHONDONTWRITEBYTECODE=1",
		"COVE_SDK_INSTALLED=1", "COVE_SDK_TESTDATA=" + filepath.Join(root, "sdk", "testdata")}
	env = append(env, more...)
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
