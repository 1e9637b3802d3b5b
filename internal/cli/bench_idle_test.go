package cli

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
)

// TestHostLimits: what the density measure adds to the refusal it stopped
// at names the host's threads against kernel.pid_max, its memory and the
// server's descriptors against the server's limit (this process plays the
// server).
func TestHostLimits(t *testing.T) {
	v := readHostView(os.Getpid())
	self, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Skip(err)
	}
	if v.tasks < len(self) {
		t.Fatalf("host threads %d, fewer than this process's %d", v.tasks, len(self))
	}
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	pidMax, err := readInt("/proc/sys/kernel/pid_max")
	if err != nil || pidMax <= 0 {
		t.Fatalf("kernel.pid_max: %d, %v", pidMax, err)
	}
	got := hostLimits(v, os.Getpid())
	for _, want := range []string{
		fmt.Sprintf("%d threads of kernel.pid_max %d (kernel.threads-max ", v.tasks, pidMax),
		fmt.Sprintf("%d MiB available", v.memAvailable>>20),
		fmt.Sprintf("server descriptors %d of %d", v.serverFDs+v.serverUserNS, lim.Cur),
	} {
		if !strings.Contains(got, want) {
			t.Errorf("hostLimits = %q, want it to hold %q", got, want)
		}
	}
}
