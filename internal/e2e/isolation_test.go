package e2e

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
)

// TestIsolation runs each escape a sandbox might try against real runc,
// overlayfs, user, pid, mount and network namespaces and cgroups.
func TestIsolation(t *testing.T) {
	s := e2etest.StartServer(t, e2etest.WithArgs("--pids-limit", "128"))
	mem := int64(128)
	a := e2etest.Create(t, s.Admin, api.CreateSandboxRequest{Name: "iso-a", Resources: &api.ResourcesRequest{MemoryMiB: &mem}})
	b := e2etest.Create(t, s.Admin, api.CreateSandboxRequest{Name: "iso-b"})

	t.Run("host processes are invisible", func(t *testing.T) {
		out := e2etest.MustOK(t, s.Admin, a.ID, "ls /proc | grep -E '^[0-9]+$' | sort -n | tr '\\n' ' '; echo; cat /proc/1/cmdline | tr '\\0' ' '")
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if !strings.Contains(lines[len(lines)-1], "cove-agent") {
			t.Errorf("PID 1 inside is %q, want cove-agent", lines[len(lines)-1])
		}
		pids := strings.Fields(lines[0])
		if len(pids) > 10 {
			t.Errorf("sandbox sees %d processes: %v", len(pids), pids)
		}
		for _, p := range pids {
			if p == strconv.Itoa(os.Getpid()) && p != "1" {
				// A coincidence of numbers is possible; check the name too.
				if got := e2etest.MustOK(t, s.Admin, a.ID, "cat /proc/"+p+"/comm 2>/dev/null || true"); strings.Contains(got, "e2e.test") {
					t.Errorf("the test process (pid %s) is visible inside", p)
				}
			}
		}
		if got := e2etest.MustOK(t, s.Admin, a.ID, "ps -o comm | grep -c -E 'cove$|runc|e2e' || true"); strings.TrimSpace(got) != "0" {
			t.Errorf("host processes visible: %s", got)
		}
	})

	t.Run("host files are invisible", func(t *testing.T) {
		marker := filepath.Join(s.DataDir, "host-secret-"+e2etest.RunID())
		if err := os.WriteFile(marker, []byte("secret"), 0o644); err != nil {
			t.Fatal(err)
		}
		res := e2etest.Sh(t, s.Admin, a.ID, "cat "+marker+"; ls "+s.DataDir, e2etest.AsRoot)
		if e2etest.ExitCode(res) == 0 || strings.Contains(res.Stdout, "secret") {
			t.Errorf("host file readable inside: %q", res.Stdout)
		}
		res = e2etest.Sh(t, s.Admin, a.ID, "ls /var/tmp /etc; cat /etc/hostname", e2etest.AsRoot)
		if strings.Contains(res.Stdout, "cove-e2e") || strings.Contains(res.Stdout, "os-release") {
			t.Errorf("host paths visible: %q", res.Stdout)
		}
	})

	t.Run("root maps to an unprivileged host uid", func(t *testing.T) {
		out := strings.Fields(e2etest.MustOK(t, s.Admin, a.ID, "cat /proc/self/uid_map", e2etest.AsRoot))
		if len(out) != 3 || out[0] != "0" || out[1] == "0" {
			t.Fatalf("uid_map = %v, want root mapped to a non-zero host uid", out)
		}
		// And root inside cannot do what host root can.
		res := e2etest.Sh(t, s.Admin, a.ID, "mount -t tmpfs none /mnt || echo refused; echo 1 > /proc/sys/kernel/panic || echo refused", e2etest.AsRoot)
		if strings.Count(res.Stdout, "refused") != 2 {
			t.Errorf("privileged operations inside: %q %q", res.Stdout, res.Stderr)
		}
	})

	t.Run("image writes stay in one sandbox", func(t *testing.T) {
		e2etest.MustOK(t, s.Admin, a.ID, "echo tampered >> /etc/passwd && echo x > /bin/newfile", e2etest.AsRoot)
		if got := e2etest.MustOK(t, s.Admin, b.ID, "grep -c tampered /etc/passwd || true; ls /bin/newfile 2>&1 || true"); !strings.HasPrefix(got, "0\n") || !strings.Contains(got, "No such file") {
			t.Errorf("sandbox b sees a's writes: %q", got)
		}
		host, err := os.ReadFile(filepath.Join(e2etest.ImagesDir(), "v2", "busybox", "rootfs", "etc", "passwd"))
		if err != nil || strings.Contains(string(host), "tampered") {
			t.Errorf("image on the host changed (%v)", err)
		}
	})

	t.Run("a fork bomb stops at the pids limit", func(t *testing.T) {
		// The shell outlives the timeout, so the command ends timed out and
		// the agent kills its process group.
		res := e2etest.Sh(t, s.Admin, a.ID, "bomb() { bomb | bomb & }; bomb; sleep 600", e2etest.WithTimeout(5))
		if res.Command.State != api.CommandTimedOut {
			t.Logf("fork bomb ended %s: %q", res.Command.State, res.Stderr)
		}
		// The host and the other sandbox kept working all along.
		if got := e2etest.MustOK(t, s.Admin, b.ID, "echo fine"); got != "fine\n" {
			t.Errorf("other sandbox: %q", got)
		}
		// The bombed sandbox serves again once the bomb is gone.
		deadline := time.Now().Add(30 * time.Second)
		for {
			// While the bomb holds every pid, starting a command is refused
			// as resource_exhausted, never an internal error.
			// Whatever of the bomb outlived the agent's kill of the group (it
			// stops trying after a while) is ended by sandbox root.
			res, err := s.Admin.ExecWait(t.Context(), a.ID, api.CreateCommandRequest{Command: "kill -9 -1 2>/dev/null; echo alive", User: "root"})
			if err == nil && res.Stdout == "alive\n" {
				break
			}
			if err != nil && api.ErrorCode(err) != api.CodeResourceExhausted {
				t.Fatalf("exec while the bomb runs: %v", err)
			}
			if time.Now().After(deadline) {
				t.Fatalf("sandbox a does not serve after the fork bomb: %+v %v", res, err)
			}
			time.Sleep(500 * time.Millisecond)
		}
		pids := e2etest.MustOK(t, s.Admin, a.ID, "cat /sys/fs/cgroup/pids/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids.max")
		if strings.TrimSpace(pids) != "128" {
			t.Errorf("pids.max inside = %q, want 128", pids)
		}
	})

	t.Run("memory past the limit is killed inside", func(t *testing.T) {
		// dd allocates one 256 MiB block: past the 128 MiB limit.
		res := e2etest.Sh(t, s.Admin, a.ID, "dd if=/dev/zero of=/dev/null bs=256M count=1")
		if res.Command.State != api.CommandKilled || res.Command.Signal != "KILL" {
			t.Errorf("allocation past the limit ended %s signal %q exit %v: %s", res.Command.State, res.Command.Signal, res.Command.ExitCode, res.Stderr)
		}
		if got := e2etest.MustOK(t, s.Admin, a.ID, "echo still-serving"); got != "still-serving\n" {
			t.Errorf("after the OOM kill: %q", got)
		}
	})

	t.Run("the host API port is unreachable", func(t *testing.T) {
		_, port, _ := net.SplitHostPort(strings.TrimPrefix(s.URL, "http://"))
		targets := []string{"127.0.0.1"}
		// The host's own non-loopback addresses: from the sandbox's network
		// namespace there is no route to them, so nothing leaves it.
		addrs, _ := net.InterfaceAddrs()
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil && !ipn.IP.IsLoopback() {
				targets = append(targets, ipn.IP.String())
			}
		}
		for _, host := range targets {
			res := e2etest.Sh(t, s.Admin, a.ID, fmt.Sprintf("wget -q -T 2 -O - http://%s:%s/healthz && echo REACHED", host, port), e2etest.WithTimeout(10))
			if strings.Contains(res.Stdout, "REACHED") || e2etest.ExitCode(res) == 0 {
				t.Errorf("host API reachable at %s:%s from inside: %q", host, port, res.Stdout)
			}
		}
		// Its only link is its own veth to the node (the fence's).
		if got := e2etest.MustOK(t, s.Admin, a.ID, "ls /sys/class/net | tr '\\n' ' '"); strings.TrimSpace(got) != "eth0 lo" {
			t.Errorf("network interfaces inside: %q, want eth0 and lo", got)
		}
	})

	t.Run("the disk limit holds", func(t *testing.T) {
		disk := int64(64)
		c := e2etest.Create(t, s.Admin, api.CreateSandboxRequest{Resources: &api.ResourcesRequest{DiskMiB: &disk}})
		res := e2etest.Sh(t, s.Admin, c.ID, "dd if=/dev/zero of=/workspace/big bs=1M count=200 2>&1; sync")
		if !strings.Contains(res.Stdout+res.Stderr, "No space left") {
			t.Errorf("writing 200 MiB into a 64 MiB disk: %q", res.Stdout+res.Stderr)
		}
		if got := e2etest.MustOK(t, s.Admin, c.ID, "rm /workspace/big && echo ok"); got != "ok\n" {
			t.Errorf("after a full disk: %q", got)
		}
	})
}
