package uidrange

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/cove-dev/cove/internal/e2e/e2etest"
	cove "github.com/cove-dev/cove/sdk/go"
)

// hostRange returns the host uid that root of sandbox id is, from its
// uid_map.
func hostRange(t *testing.T, c *cove.Client, id string) uint32 {
	t.Helper()
	f := strings.Fields(e2etest.MustOK(t, c, id, "cat /proc/self/uid_map", e2etest.AsRoot))
	if len(f) != 3 || f[0] != "0" || f[2] != "65536" {
		t.Fatalf("uid_map of %s: %q", id, f)
	}
	n, err := strconv.ParseUint(f[1], 10, 32)
	if err != nil {
		t.Fatal(err)
	}
	return uint32(n)
}

// hostOwner returns the host owner of path.
func hostOwner(t *testing.T, path string) (uid, gid uint32) {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Uid, st.Gid
}

// upper is the host path of a file the sandbox wrote: in its upper layer.
func upper(s *e2etest.Server, id, path string) string {
	return filepath.Join(s.DataDir, "sandboxes", id, "disk", "upper", path)
}

// processUIDs returns the host real uids of the processes in sandbox id's
// cgroup (its name is in every line of /proc/PID/cgroup).
func processUIDs(t *testing.T, id string) map[uint32]int {
	t.Helper()
	uids := map[uint32]int{}
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		cg, err := os.ReadFile(filepath.Join(d, "cgroup"))
		if err != nil || !strings.Contains(string(cg), "/"+id+"\n") {
			continue
		}
		status, err := os.ReadFile(filepath.Join(d, "status"))
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(status), "\n") {
			if rest, ok := strings.CutPrefix(l, "Uid:"); ok {
				if n, err := strconv.ParseUint(strings.Fields(rest)[0], 10, 32); err == nil {
					uids[uint32(n)]++
				}
			}
		}
	}
	return uids
}

// agentPID is the host PID of sandbox id's agent, from runc.
func agentPID(t *testing.T, s *e2etest.Server, id string) int {
	t.Helper()
	out, err := exec.Command("runc", "--root", filepath.Join(s.DataDir, "runc"), "state", id).Output()
	if err != nil {
		t.Fatalf("runc state %s: %v", id, err)
	}
	var st struct {
		PID int `json:"pid"`
	}
	if err := json.Unmarshal(out, &st); err != nil {
		t.Fatal(err)
	}
	return st.PID
}

// procUID is the host real uid of process pid.
func procUID(t *testing.T, pid int) uint32 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, "Uid:"); ok {
			n, err := strconv.ParseUint(strings.Fields(rest)[0], 10, 32)
			if err != nil {
				t.Fatal(err)
			}
			return uint32(n)
		}
	}
	t.Fatalf("no Uid in /proc/%d/status", pid)
	return 0
}
