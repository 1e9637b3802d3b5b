// Package diskfull runs `cove serve` on a small data disk of its own: the
// node refuses new sandboxes it has no room for, with a clear error, and
// the sandboxes it admitted can fill their disks without losing a write.
package diskfull

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
)

func TestMain(m *testing.M) { e2etest.Main(m) }

func TestFullDataDisk(t *testing.T) {
	mnt := e2etest.SmallDisk(t, 768)
	s := e2etest.StartServer(t, e2etest.WithDataDir(filepath.Join(mnt, "data")),
		e2etest.WithArgs("--warm-pool", "0", "--disk-overcommit", "1", "--disk-reserve-mib", "64"))
	c := s.Admin
	disk := int64(128)
	var admitted []api.Sandbox
	var refusal error
	for len(admitted) < 20 {
		sb, err := c.CreateSandbox(t.Context(), api.CreateSandboxRequest{Resources: &api.ResourcesRequest{DiskMiB: &disk}}, true)
		if err != nil {
			refusal = err
			break
		}
		if sb.State != api.StateRunning {
			t.Fatalf("sandbox %s is %s (%s)", sb.ID, sb.State, sb.StateReason)
		}
		admitted = append(admitted, sb)
	}
	if refusal == nil || len(admitted) == 0 {
		t.Fatalf("%d sandboxes of %d MiB on a 768 MiB data disk, refusal %v", len(admitted), disk, refusal)
	}
	if api.ErrorCode(refusal) != api.CodeResourceExhausted || !strings.Contains(refusal.Error(), "cannot hold another 128 MiB disk") {
		t.Fatalf("refusal = %v; want resource_exhausted saying why", refusal)
	}
	t.Logf("admitted %d sandboxes of %d MiB, then: %v", len(admitted), disk, refusal)

	// Every admitted sandbox fills its disk; every acknowledged write reads
	// back whole.
	sums := map[string]string{}
	for _, sb := range admitted {
		out := e2etest.MustOK(t, c, sb.ID, "dd if=/dev/urandom of=/workspace/big bs=1M count=96 2>/dev/null && sync && md5sum /workspace/big")
		sums[sb.ID] = strings.Fields(out)[0]
	}
	for _, sb := range admitted {
		out := e2etest.MustOK(t, c, sb.ID, "md5sum /workspace/big")
		if got := strings.Fields(out)[0]; got != sums[sb.ID] {
			t.Errorf("sandbox %s reads back %s, wrote %s", sb.ID, got, sums[sb.ID])
		}
	}
	// Still refused, and the API still answers (its database writes work).
	if _, err := c.CreateSandbox(t.Context(), api.CreateSandboxRequest{Resources: &api.ResourcesRequest{DiskMiB: &disk}}, false); api.ErrorCode(err) != api.CodeResourceExhausted {
		t.Fatalf("create on a full node: %v", err)
	}
	// Room comes back when a sandbox ends.
	if _, err := c.TerminateSandbox(t.Context(), admitted[0].ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitSandbox(t.Context(), admitted[0].ID, api.StateTerminated, 0); err != nil {
		t.Fatal(err)
	}
	e2etest.Create(t, c, api.CreateSandboxRequest{Resources: &api.ResourcesRequest{DiskMiB: &disk}})
}

func TestNodeDiskFilledFromOutside(t *testing.T) {
	mnt := e2etest.SmallDisk(t, 1024)
	db := t.TempDir()
	s := e2etest.StartServer(t, e2etest.WithDataDir(filepath.Join(mnt, "data")),
		e2etest.WithArgs("--warm-pool", "0", "--disk-overcommit", "1", "--disk-reserve-mib", "64", "--store", "sqlite:"+db+"/cove.db"))
	c := s.Admin
	disk := int64(128)
	sb := e2etest.Create(t, c, api.CreateSandboxRequest{Resources: &api.ResourcesRequest{DiskMiB: &disk}})
	e2etest.MustOK(t, c, sb.ID, "echo hi")

	filler := filepath.Join(mnt, "filler")
	fill(t, filler)
	t.Cleanup(func() { os.Remove(filler) })

	_, err := c.Exec(t.Context(), sb.ID, api.CreateCommandRequest{Command: "echo full"})
	t.Logf("exec: %v", err)
	_, err = c.WriteFile(t.Context(), sb.ID, "/workspace/f", strings.NewReader(strings.Repeat("hello", 1<<20)))
	t.Logf("write: %v", err)
	_, err = c.CreateSandbox(t.Context(), api.CreateSandboxRequest{Resources: &api.ResourcesRequest{DiskMiB: &disk}}, true)
	t.Logf("create: %v", err)
	code, _, body := e2etest.RawRequest(t, "GET", s.URL+"/readyz", "", "")
	t.Logf("readyz %d %s", code, body)
	t.Fail()
}

// fill writes path until the filesystem it is on has no room left.
func fill(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling %s: %v", path, err)
			}
			break
		}
	}
	for _, n := range []int{4096, 512, 1} {
		for {
			if _, err := f.Write(buf[:n]); err != nil {
				break
			}
		}
	}
	if err := f.Sync(); err != nil && !errors.Is(err, syscall.ENOSPC) {
		t.Fatal(err)
	}
}
