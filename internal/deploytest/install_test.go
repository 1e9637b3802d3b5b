package deploytest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestMakeInstall runs `make install` into a staging directory with
// another prefix, on the binaries `make build` left in bin/ (the build
// itself is not run again), and checks what it put where: the binaries,
// the documentation, and units that run the installed binary and that
// systemd accepts.
func TestMakeInstall(t *testing.T) {
	root := repoRoot(t)
	for _, b := range []string{"cove", "cove-agent"} {
		if _, err := os.Stat(filepath.Join(root, "bin", b)); err != nil {
			t.Skipf("bin/%s is not built (make build; make test builds it before the tests): %v", b, err)
		}
	}
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make")
	}
	dest := t.TempDir()
	const prefix = "/opt/cove"
	// -o build: the binaries are taken as they are.
	cmd := exec.Command("make", "--no-print-directory", "-o", "build", "install", "DESTDIR="+dest, "PREFIX="+prefix, "UNITDIR=/lib/systemd/system")
	cmd.Dir = root
	// Not the settings of a make that runs this test (make test).
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); k != "MAKEFLAGS" && k != "MFLAGS" && k != "MAKELEVEL" {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make install: %v\n%s", err, out)
	}
	for _, f := range []struct {
		path string
		mode os.FileMode
	}{
		{prefix + "/bin/cove", 0o755},
		{prefix + "/bin/cove-agent", 0o755},
		{prefix + "/share/doc/cove/fleet.md", 0o644},
		{"/lib/systemd/system/cove.service", 0o644},
		{"/lib/systemd/system/cove-control.service", 0o644},
		{"/lib/systemd/system/cove-node.service", 0o644},
		{"/etc/cove/cove.toml", 0o644},
	} {
		fi, err := os.Stat(filepath.Join(dest, f.path))
		if err != nil {
			t.Errorf("not installed: %v", err)
			continue
		}
		if fi.Mode().Perm() != f.mode {
			t.Errorf("%s: mode %v, want %v", f.path, fi.Mode().Perm(), f.mode)
		}
	}
	// The units name the installed binary and documentation; systemd
	// checks them with the staging directory's binary at that path.
	analyze := requireSystemdAnalyze(t)
	var paths []string
	for _, name := range units {
		b, err := os.ReadFile(filepath.Join(dest, "lib/systemd/system", name))
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		if !strings.Contains(text, "ExecStart="+prefix+"/bin/cove ") || strings.Contains(text, "/usr/local/") {
			t.Errorf("%s: does not run %s/bin/cove, or still names /usr/local:\n%s", name, prefix, text)
		}
		if !strings.Contains(text, "Documentation=file:"+prefix+"/share/doc/cove/fleet.md") {
			t.Errorf("%s: its documentation is not the installed page", name)
		}
		p := filepath.Join(t.TempDir(), name)
		staged := strings.ReplaceAll(text, prefix+"/bin/cove", filepath.Join(dest, prefix, "bin", "cove"))
		if err := os.WriteFile(p, []byte(staged), 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	verify(t, analyze, paths)

	// The example config is installed once: an operator's own file is
	// never overwritten by a later make install.
	conf := filepath.Join(dest, "etc/cove/cove.toml")
	if b, err := os.ReadFile(conf); err != nil || !strings.Contains(string(b), "#listen = '127.0.0.1:7070'") {
		t.Fatalf("installed cove.toml is not the example: %v\n%s", err, b)
	}
	mine := "listen = \"0.0.0.0:7070\"\n"
	if err := os.WriteFile(conf, []byte(mine), 0o600); err != nil {
		t.Fatal(err)
	}
	again := exec.Command(cmd.Args[0], cmd.Args[1:]...)
	again.Dir, again.Env = cmd.Dir, cmd.Env
	if out, err := again.CombinedOutput(); err != nil {
		t.Fatalf("make install again: %v\n%s", err, out)
	}
	if b, err := os.ReadFile(conf); err != nil || string(b) != mine {
		t.Fatalf("make install overwrote the operator's cove.toml: %v\n%s", err, b)
	}
}
