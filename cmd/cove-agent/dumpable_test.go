package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cove-dev/cove/internal/agent/client"
	"github.com/cove-dev/cove/internal/agent/wire"
)

// probe tries what an attacker with the same uid as process pid would, and
// prints one "name=result" line for each ("self" reports whether the
// probe itself is dumpable).
func probe(pid string) {
	if pid == "self" {
		d, err := unix.PrctlRetInt(unix.PR_GET_DUMPABLE, 0, 0, 0, 0)
		fmt.Printf("dumpable=%d %v\n", d, err)
		return
	}
	n, _ := strconv.Atoi(pid)
	result := func(name string, err error) {
		if err == nil {
			fmt.Printf("%s=ok\n", name)
		} else {
			fmt.Printf("%s=%v\n", name, err)
		}
	}
	_, err := os.ReadFile("/proc/" + pid + "/environ")
	result("environ", err)
	f, err := os.Open("/proc/" + pid + "/mem")
	if err == nil {
		f.Close()
	}
	result("mem", err)
	pidfd, err := unix.PidfdOpen(n, 0)
	if err == nil {
		var fd int
		fd, err = unix.PidfdGetfd(pidfd, 2, 0)
		if err == nil {
			unix.Close(fd)
		}
		unix.Close(pidfd)
	}
	result("getfd", err)
	// Seize does not stop the tracee; the probe's exit detaches it.
	runtime.LockOSThread()
	_, _, e := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_SEIZE, uintptr(n), 0, 0, 0, 0)
	if e != 0 {
		err = e
	} else {
		err = nil
	}
	result("seize", err)
}

// runProbe runs the test binary as probe against pid, as uid 1000.
func runProbe(t *testing.T, bin, pid string) map[string]string {
	t.Helper()
	cmd := exec.Command(bin)
	cmd.Env = []string{"COVE_AGENT_TEST_PROBE=" + pid}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 1000, Gid: 1000}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("probe: %v: %s", err, out)
	}
	res := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		k, v, _ := strings.Cut(line, "=")
		res[k] = v
	}
	return res
}

// TestAgentNotDumpable: a process of the agent's own uid cannot read the
// agent's environment or memory, take its descriptors or ptrace it, while
// the commands it starts stay dumpable (their own debuggers work). The
// agent runs as uid 1000 here, so that a probe of the same uid has no
// capability that would override the check, as root in a sandbox has none.
func TestAgentNotDumpable(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run the agent and the probe as another user")
	}
	dir := t.TempDir()
	for d := dir; d != "/"; d = filepath.Dir(d) {
		if fi, err := os.Stat(d); err == nil && fi.Mode().Perm()&0o001 == 0 {
			if err := os.Chmod(d, fi.Mode().Perm()|0o011); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The test binary, where uid 1000 can run it.
	bin := filepath.Join(dir, "cove-agent.test")
	src, err := os.Open(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	dst, err := os.OpenFile(bin, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err == nil {
		_, err = io.Copy(dst, src)
		if cerr := dst.Close(); err == nil {
			err = cerr
		}
	}
	src.Close()
	if err != nil {
		t.Fatal(err)
	}
	run := filepath.Join(dir, "run")
	if err := os.Mkdir(run, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(run, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(run, "agent.sock")

	cmd := exec.Command(bin, "--listen", sock, "--workdir", filepath.Join(run, "work"))
	cmd.Env = []string{"COVE_AGENT_TEST_MAIN=1", "SECRET=agent-environment"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 1000, Gid: 1000}, Pdeathsig: syscall.SIGKILL}
	var logs syncBuffer
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		<-waited
		if t.Failed() {
			t.Logf("agent log:\n%s", logs.String())
		}
	})

	c := client.Dial(sock)
	defer c.Close()
	ctx := t.Context()
	var p wire.Ping
	for range 1000 { // until the agent listens
		if p, err = c.Ping(ctx); err == nil {
			break
		}
		select {
		case err := <-waited:
			waited <- err
			t.Fatalf("agent exited: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	if err != nil {
		t.Fatalf("ping: %v", err)
	}

	agent := runProbe(t, bin, strconv.Itoa(p.PID))
	for _, k := range []string{"environ", "mem", "getfd", "seize"} {
		if v, ok := agent[k]; !ok || v == "ok" {
			t.Errorf("a process of the agent's uid got %s of the agent: %q", k, v)
		}
	}

	// A command of the agent stays dumpable: the same probe reaches it.
	st, err := c.Exec(ctx, wire.ExecRequest{ID: "sleeper", Argv: []string{"sleep", "1000"}, Env: []string{"PATH=/usr/bin:/bin"}})
	if err != nil {
		t.Fatal(err)
	}
	cmdProbe := runProbe(t, bin, strconv.Itoa(st.PID))
	for _, k := range []string{"environ", "mem", "getfd", "seize"} {
		if cmdProbe[k] != "ok" {
			t.Errorf("%s of a command: %q, want ok", k, cmdProbe[k])
		}
	}
	if err := c.Signal(ctx, "sleeper", "KILL"); err != nil {
		t.Fatal(err)
	}
	collect(t, c, "sleeper")
	if _, err := c.Exec(ctx, wire.ExecRequest{ID: "self", Argv: []string{bin}, Env: []string{"COVE_AGENT_TEST_PROBE=self"}}); err != nil {
		t.Fatal(err)
	}
	if out, _ := collect(t, c, "self"); out != "dumpable=1 <nil>\n" {
		t.Errorf("a command of the agent: %q, want dumpable=1", out)
	}
}
