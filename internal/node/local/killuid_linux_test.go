package local

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
)

// TestInMountNS: a clone's kill takes only processes of the clone's own
// mount namespace (and zombies, which hold nothing): a process of the same
// uid elsewhere on the host (another node's sandbox, side by side in
// tests) is left alone.
func TestInMountNS(t *testing.T) {
	own, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	if !inMountNS(os.Getpid(), own) {
		t.Errorf("this process is not in its own mount namespace %s", own)
	}
	if inMountNS(os.Getpid(), "mnt:[1]") {
		t.Error("this process counts as in another mount namespace")
	}
	// A zombie: exited, not yet reaped.
	c := exec.Command("true")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	defer c.Wait()
	for !procZombie(c.Process.Pid) {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", c.Process.Pid)); err != nil {
			t.Fatal(err)
		}
	}
	if !inMountNS(c.Process.Pid, "mnt:[1]") {
		t.Error("a zombie does not count (it would be waited for forever otherwise)")
	}
}
