// Package harnesscheck is the smallest root test package over e2etest: it
// shows that a package of its own can start servers while other root test
// packages run theirs at the same time, without their names meeting.
package harnesscheck

import (
	"testing"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
)

func TestMain(m *testing.M) { e2etest.Main(m) }

func TestEcho(t *testing.T) {
	s := e2etest.StartServer(t)
	sb := e2etest.Create(t, s.Admin, api.CreateSandboxRequest{})
	if out := e2etest.MustOK(t, s.Admin, sb.ID, "echo ok"); out != "ok\n" {
		t.Fatalf("echo ok: %q", out)
	}
	t.Logf("table %s, subnet %s, cgroup %s", s.Table, s.Subnet, s.Cgroup)
}
