// Package volumecli runs `cove volume` and `cove create --volume`, the
// real binary, against a real `cove serve`: a volume made from the CLI is
// mounted by two sandboxes, which see each other's writes, one of them
// read-only; it outlives them; refusals are one readable line and a
// non-zero exit.
package volumecli

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
)

func TestMain(m *testing.M) { e2etest.Main(m) }

// cli runs the real cove binary against s (its first start's CLI config)
// and returns stdout, stderr and the exit code.
func cli(t *testing.T, s *e2etest.Server, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(filepath.Join(e2etest.BinDir(), "cove"), args...)
	cmd.Env = append(os.Environ(), "HOME="+s.Home, "COVE_URL=", "COVE_API_KEY=")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

// mustCLI is cli that must exit 0; it answers stdout.
func mustCLI(t *testing.T, s *e2etest.Server, args ...string) string {
	t.Helper()
	out, errOut, code := cli(t, s, args...)
	if code != 0 {
		t.Fatalf("cove %s: exit %d, stdout %q, stderr %q", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

// refused checks that a cove run failed with one line on stderr holding
// want, and nothing on stdout.
func refused(t *testing.T, s *e2etest.Server, want string, args ...string) {
	t.Helper()
	out, errOut, code := cli(t, s, args...)
	if code == 0 || out != "" || errOut == "" || strings.Count(strings.TrimSpace(errOut), "\n") != 0 || !strings.Contains(errOut, want) {
		t.Errorf("cove %s: exit %d, stdout %q, stderr %q; want one line with %q", strings.Join(args, " "), code, out, errOut, want)
	}
}

func TestVolumeCLI(t *testing.T) {
	s := e2etest.StartServer(t, e2etest.WithArgs("--warm-pool", "0"))

	out := mustCLI(t, s, "volume", "create", "cache", "--size", "64")
	f := strings.Fields(out)
	if len(f) != 3 || !strings.HasPrefix(f[0], "vol_") || f[1] != "cache" || f[2] != "64" {
		t.Fatalf("volume create: %q", out)
	}
	volID := f[0]

	a := strings.TrimSpace(mustCLI(t, s, "create", "--name", "va", "--volume", "cache:/shared"))
	b := strings.TrimSpace(mustCLI(t, s, "create", "--name", "vb", "--volume", volID+":/ro:ro", "--json"))
	var sbB api.Sandbox
	if err := json.Unmarshal([]byte(b), &sbB); err != nil {
		t.Fatalf("create --json: %v in %q", err, b)
	}
	// Mounted by its ID, shown with its name.
	if want := []api.VolumeMount{{Name: "cache", Path: "/ro", ReadOnly: true, VolumeID: volID}}; !slices.Equal(sbB.Volumes, want) {
		t.Errorf("create --volume :ro: volumes %+v, want %+v", sbB.Volumes, want)
	}
	mustCLI(t, s, "exec", "va", "--", "sh", "-c", "echo from-a > /shared/note")
	if out := mustCLI(t, s, "exec", "vb", "--", "cat", "/ro/note"); out != "from-a\n" {
		t.Errorf("the second sandbox reads %q", out)
	}
	if _, _, code := cli(t, s, "exec", "vb", "--", "touch", "/ro/other"); code == 0 {
		t.Errorf("a write to a read-only mount succeeded")
	}

	out = mustCLI(t, s, "volume", "ls")
	if !strings.HasPrefix(out, "ID") || !strings.Contains(out, volID) || !strings.Contains(out, a) || !strings.Contains(out, sbB.ID) {
		t.Errorf("volume ls: %q", out)
	}
	var v api.Volume
	if err := json.Unmarshal([]byte(mustCLI(t, s, "volume", "get", "cache")), &v); err != nil || v.ID != volID || v.SizeMiB != 64 || len(v.Sandboxes) != 2 {
		t.Errorf("volume get: %+v %v", v, err)
	}

	// Mounted: not deleted, and the line names who mounts it.
	refused(t, s, a, "volume", "rm", "cache")
	// Bad input, and what is not there.
	refused(t, s, "must look like NAME:/PATH", "create", "--volume", "cache")
	refused(t, s, "must look like NAME:/PATH", "create", "--volume", "cache:relative")
	refused(t, s, "needs --size", "volume", "create", "other")
	refused(t, s, "", "volume", "create", "Bad_Name", "--size", "64")
	refused(t, s, "", "volume", "create", "small", "--size", "1")
	refused(t, s, "", "volume", "create", "cache", "--size", "64")
	refused(t, s, "", "create", "--volume", "nope:/x")
	refused(t, s, "", "create", "--volume", "cache:/proc/x")

	// The sandboxes go; the files stay for the next one.
	mustCLI(t, s, "rm", "va")
	mustCLI(t, s, "rm", "vb")
	mustCLI(t, s, "create", "--name", "vc", "--volume", "cache:/again")
	if out := mustCLI(t, s, "exec", "vc", "--", "cat", "/again/note"); out != "from-a\n" {
		t.Errorf("a later sandbox reads %q", out)
	}
	mustCLI(t, s, "rm", "vc")
	if out := mustCLI(t, s, "volume", "rm", "cache"); out != "cache deleted\n" {
		t.Errorf("volume rm: %q", out)
	}
	refused(t, s, "", "volume", "get", "cache")
	if out := mustCLI(t, s, "volume", "ls", "--json"); strings.Contains(out, volID) {
		t.Errorf("volume ls after rm: %q", out)
	}
}
