package deploytest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/cove-dev/cove/internal/cli"
	"github.com/cove-dev/cove/internal/images/imagetest"
)

// capBits are the capabilities the units and the chart name, by number.
var capBits = map[string]uint{"CAP_CHOWN": 0, "CAP_DAC_OVERRIDE": 1, "CAP_FOWNER": 3, "CAP_FSETID": 4}

// TestControlCapabilities runs `cove control` as cove-control.service
// does, as root bounded to the unit's CapabilityBoundingSet with no new
// privileges, and imports an image through it: its files' owners and
// set-ID bits must come out as the layer has them. Without CAP_CHOWN the
// same import is refused, which is why the unit keeps it.
func TestControlCapabilities(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the test bounds root's capabilities")
	}
	bin := os.Getenv("COVE_BIN")
	if bin == "" {
		t.Skip("COVE_BIN is not set (make test sets it to the built bin/)")
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Fatalf("setpriv (util-linux): %v", err)
	}
	caps := values(readUnit(t, "cove-control.service"), "Service", "CapabilityBoundingSet")
	if len(caps) != 1 {
		t.Fatalf("CapabilityBoundingSet: %v", caps)
	}
	unitCaps := strings.Fields(caps[0])
	var withoutChown []string
	for _, c := range unitCaps {
		if c != "CAP_CHOWN" {
			withoutChown = append(withoutChown, c)
		}
	}
	archive := filepath.Join(t.TempDir(), "image.tar")
	imagetest.DockerArchive(t, imagetest.Image(t, v1.Config{Cmd: []string{"/bin/sh"}},
		imagetest.Busybox(t, false, "", ""),
		imagetest.Layer(t,
			imagetest.Dir("usr/", 0o755), imagetest.Dir("usr/bin/", 0o755),
			imagetest.Entry{Name: "usr/bin/su", Mode: 0o4755, Body: "su"},
			imagetest.Entry{Name: "usr/bin/wall", Mode: 0o2755, GID: 5, Body: "wall"},
			imagetest.Dir("home/", 0o755),
			imagetest.Entry{Name: "home/u/", Type: '5', Mode: 0o700, UID: 1000, GID: 1000},
			imagetest.Entry{Name: "home/u/notes", Mode: 0o600, UID: 1000, GID: 1000, Body: "u's"},
		)), archive)

	tests := []struct {
		name    string
		caps    []string
		refused string // "" when the import must succeed
	}{
		{"the unit's capabilities", unitCaps, ""},
		{"without CAP_CHOWN", withoutChown, "operation not permitted"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bounding := "-all"
			var mask uint64
			for _, c := range tt.caps {
				bit, ok := capBits[c]
				if !ok {
					t.Fatalf("%s: a capability the test does not know", c)
				}
				bounding += ",+" + strings.ToLower(strings.TrimPrefix(c, "CAP_"))
				mask |= 1 << bit
			}
			dir := t.TempDir()
			ready := filepath.Join(dir, "ready.json")
			var logs bytes.Buffer
			cmd := exec.Command(setpriv, "--bounding-set="+bounding, "--inh-caps=-all", "--no-new-privs",
				filepath.Join(bin, "cove"), "control", "--listen", "127.0.0.1:0", "--node-listen", "127.0.0.1:0",
				"--data-dir", filepath.Join(dir, "data"), "--ready-file", ready)
			cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
			cmd.Stdout, cmd.Stderr = &logs, &logs
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			t.Cleanup(func() {
				cmd.Process.Signal(syscall.SIGTERM)
				select {
				case <-exited:
				case <-time.After(30 * time.Second):
					cmd.Process.Kill()
					<-exited
				}
			})
			api := waitReady(t, ready, exited, &logs)
			if eff := capEff(t, cmd.Process.Pid); eff != mask {
				t.Fatalf("cove control runs with capabilities %#x, want %#x", eff, mask)
			}
			key, err := os.ReadFile(filepath.Join(dir, "data", "admin-api-key"))
			if err != nil {
				t.Fatal(err)
			}
			var out, errb bytes.Buffer
			code := cli.Main(context.Background(), cli.Env{
				Args: []string{"images", "import", archive, "--name", "caps"}, Stdout: &out, Stderr: &errb,
				Getenv: func(k string) string {
					return map[string]string{"COVE_URL": "http://" + api, "COVE_API_KEY": strings.TrimSpace(string(key))}[k]
				},
			})
			if tt.refused != "" {
				if code == 0 || !strings.Contains(errb.String(), tt.refused) {
					t.Fatalf("import: exit %d, %s; want it refused (%s)", code, errb.String(), tt.refused)
				}
				return
			}
			if code != 0 {
				t.Fatalf("import: exit %d: %s\n%s", code, errb.String(), logs.String())
			}
			roots, _ := filepath.Glob(filepath.Join(dir, "data", "images", "v2", "sha256-*", "rootfs"))
			if len(roots) != 1 {
				t.Fatalf("unpacked images: %v", roots)
			}
			for _, f := range []struct {
				path     string
				uid, gid uint32
				mode     os.FileMode
			}{
				{"usr/bin/su", 0, 0, os.ModeSetuid | 0o755},
				{"usr/bin/wall", 0, 5, os.ModeSetgid | 0o755},
				{"home/u/notes", 1000, 1000, 0o600},
			} {
				fi, err := os.Lstat(filepath.Join(roots[0], f.path))
				if err != nil {
					t.Fatal(err)
				}
				st := fi.Sys().(*syscall.Stat_t)
				if st.Uid != f.uid || st.Gid != f.gid || fi.Mode() != f.mode {
					t.Errorf("%s: %d:%d %v, want %d:%d %v", f.path, st.Uid, st.Gid, fi.Mode(), f.uid, f.gid, f.mode)
				}
			}
		})
	}
}

// waitReady waits for the ready file and returns the API's address.
func waitReady(t *testing.T, path string, exited <-chan error, logs *bytes.Buffer) string {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			t.Fatalf("cove control exited: %v\n%s", err, logs.String())
		default:
		}
		if b, err := os.ReadFile(path); err == nil {
			var r struct {
				Listeners map[string]string `json:"listeners"`
			}
			if err := json.Unmarshal(b, &r); err != nil {
				t.Fatal(err)
			}
			return r.Listeners["api"]
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("cove control wrote no ready file within a minute\n%s", logs.String())
	return ""
}

// capEff is a process's effective capability set.
func capEff(t *testing.T, pid int) uint64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no CapEff")
	return 0
}
