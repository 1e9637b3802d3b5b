// Package fence tests the network fence and gateway of a real `cove serve`
// against real sandboxes: what a sandbox sends with a source address not
// its own, what the gateway refuses to reach whatever the policy (the node
// itself), and plain HTTP beyond a connection's first request. The tests
// need root; they skip otherwise.
package fence

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/cove-dev/cove/internal/e2e/e2etest"
)

func TestMain(m *testing.M) { e2etest.Main(m) }

// netnsOf is the path of a sandbox's network namespace: its init's, as
// runc reports it.
func netnsOf(t *testing.T, s *e2etest.Server, id string) string {
	t.Helper()
	out, err := exec.Command("runc", "--root", filepath.Join(s.DataDir, "runc"), "state", id).Output()
	if err != nil {
		t.Fatalf("runc state %s: %v", id, err)
	}
	var st struct {
		PID int `json:"pid"`
	}
	if err := json.Unmarshal(out, &st); err != nil || st.PID == 0 {
		t.Fatalf("runc state %s: %q %v", id, out, err)
	}
	return fmt.Sprintf("/proc/%d/ns/net", st.PID)
}
