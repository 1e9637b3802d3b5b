package deploytest

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// distDir is where `make dist` wrote its output; make test runs
// `make dist ARCHES=amd64` before the tests.
func distDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(repoRoot(t), "dist")
	if m, _ := filepath.Glob(filepath.Join(dir, "cove_*_amd64.deb")); len(m) != 1 {
		t.Fatalf("dist/ holds %d amd64 .deb (want 1): run `make dist ARCHES=amd64` first", len(m))
	}
	return dir
}

// TestDistSums: SHA256SUMS names every archive and package in dist/ and
// each one's digest matches the file.
func TestDistSums(t *testing.T) {
	dir := distDir(t)
	b, err := os.ReadFile(filepath.Join(dir, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	var named []string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		sum, name, ok := strings.Cut(line, "  ")
		if !ok {
			t.Fatalf("SHA256SUMS: %q is not `digest  name`", line)
		}
		f, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		h := sha256.Sum256(f)
		if got := hex.EncodeToString(h[:]); got != sum {
			t.Errorf("%s: SHA256SUMS says %s, the file is %s", name, sum, got)
		}
		named = append(named, name)
	}
	all, _ := filepath.Glob(filepath.Join(dir, "cove_*"))
	for _, p := range all {
		if !slices.Contains(named, filepath.Base(p)) {
			t.Errorf("%s is not in SHA256SUMS", filepath.Base(p))
		}
	}
}

// TestDistArchive: the amd64 archive holds cove and cove-agent
// (executable), the units, the example config and the docs, under one
// top directory named for the version.
func TestDistArchive(t *testing.T) {
	dir := distDir(t)
	m, _ := filepath.Glob(filepath.Join(dir, "cove_*_linux_amd64.tar.gz"))
	if len(m) != 1 {
		t.Fatalf("%d amd64 archives", len(m))
	}
	top := strings.TrimSuffix(filepath.Base(m[0]), ".tar.gz")
	f, err := os.Open(m[0])
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	modes := map[string]int64{}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			modes[h.Name] = h.Mode
		}
	}
	want := map[string]int64{
		"cove": 0o755, "cove-agent": 0o755, "LICENSE": 0o644, "README.md": 0o644, "CHANGELOG.md": 0o644,
		"deploy/cove.toml": 0o644, "deploy/systemd/cove.service": 0o644,
	}
	for name, mode := range want {
		got, ok := modes[top+"/"+name]
		if !ok {
			t.Errorf("%s: no %s/%s (has %v)", filepath.Base(m[0]), top, name, modes)
		} else if got != mode {
			t.Errorf("%s/%s: mode %o, want %o", top, name, got, mode)
		}
	}
}

// TestDistDeb installs the amd64 .deb with dpkg into a scratch root (its
// own dpkg database; the host's is not touched), then checks the files
// and their modes, that the installed cove prints its version line, that
// the config is a conffile, and has systemd-analyze verify the installed
// units in that root.
func TestDistDeb(t *testing.T) {
	dir := distDir(t)
	debs, _ := filepath.Glob(filepath.Join(dir, "cove_*_amd64.deb"))
	dpkg, err := exec.LookPath("dpkg")
	if err != nil {
		t.Skip("no dpkg")
	}
	root := t.TempDir()
	for _, d := range []string{"var/lib/dpkg/info", "var/lib/dpkg/updates", "var/lib/dpkg/triggers"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"var/lib/dpkg/status", "var/lib/dpkg/available"} {
		if err := os.WriteFile(filepath.Join(root, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The scratch root has none of the packages cove depends on, and no
	// shell for maintainer scripts (the package has none).
	cmd := exec.Command(dpkg, "--root="+root, "--force-depends", "--force-not-root", "--force-script-chrootless", "--log=/dev/null", "-i", debs[0])
	cmd.Env = append(os.Environ(), "DPKG_ROOT="+root)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("dpkg -i: %v\n%s", err, out)
	}
	want := map[string]os.FileMode{
		"usr/bin/cove": 0o755, "usr/bin/cove-agent": 0o755,
		"lib/systemd/system/cove.service": 0o644, "lib/systemd/system/cove-node.service": 0o644, "lib/systemd/system/cove-control.service": 0o644,
		"etc/cove/cove.toml":              0o644,
		"usr/share/doc/cove/LICENSE":      0o644,
		"usr/share/doc/cove/README.md":    0o644,
		"usr/share/doc/cove/CHANGELOG.md": 0o644,
	}
	for name, mode := range want {
		st, err := os.Stat(filepath.Join(root, name))
		if err != nil {
			t.Error(err)
			continue
		}
		if st.Mode().Perm() != mode || !st.Mode().IsRegular() {
			t.Errorf("%s: mode %v, want %v", name, st.Mode(), mode)
		}
	}
	out, err := exec.Command(dpkg, "--root="+root, "-s", "cove").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "Status: install ok installed") || !strings.Contains(string(out), "/etc/cove/cove.toml") {
		t.Errorf("dpkg -s cove: %v\n%s", err, out)
	}
	for _, args := range [][]string{{"version"}, {"--version"}} {
		out, err := exec.Command(filepath.Join(root, "usr/bin/cove"), args...).Output()
		if err != nil {
			t.Fatalf("installed cove %s: %v", args[0], err)
		}
		if !regexp.MustCompile(`^cove \S+ \(commit \S+, go1\.[0-9.]+\)\n$`).Match(out) {
			t.Errorf("installed cove %s: %q is not one version line", args[0], out)
		}
	}
	unit, err := os.ReadFile(filepath.Join(root, "lib/systemd/system/cove.service"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(unit), "ExecStart=/usr/bin/cove serve") || strings.Contains(string(unit), "/usr/local/") {
		t.Errorf("installed cove.service does not run /usr/bin/cove:\n%s", unit)
	}
	analyze := requireSystemdAnalyze(t)
	// The scratch root has no systemd of its own: the host's targets
	// (sysinit, network-online, multi-user…) are what the units order
	// themselves against.
	targets, _ := filepath.Glob("/lib/systemd/system/*.target")
	for _, tg := range targets {
		b, err := os.ReadFile(tg)
		if err != nil {
			continue
		}
		if err := os.WriteFile(filepath.Join(root, "lib/systemd/system", filepath.Base(tg)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var paths []string
	for _, u := range units {
		paths = append(paths, filepath.Join(root, "lib/systemd/system", u))
	}
	vout, err := exec.Command(analyze, append([]string{"verify", "--man=no", "--root=" + root}, paths...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("systemd-analyze verify --root: %v\n%s", err, vout)
	}
	for _, line := range strings.Split(string(vout), "\n") {
		for _, u := range units {
			if strings.Contains(line, u) {
				t.Errorf("systemd-analyze verify: %s", line)
			}
		}
	}
}
