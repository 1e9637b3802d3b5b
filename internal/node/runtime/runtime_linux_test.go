package runtime

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/cove-dev/cove/internal/mountinfo"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/agent/client"
	"github.com/cove-dev/cove/internal/agent/wire"
	"github.com/cove-dev/cove/internal/node/image"
)

// Shared by the root integration tests; set by TestMain.
var (
	testRoot     string      // per-run directory, searchable by the mapped root
	testAgent    string      // static cove-agent built for this run
	testImage    image.Image // busybox image
	testCgroup   string      // per-run cgroup parent
	testSetupErr error       // why the root tests cannot run, when they cannot
)

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	if os.Geteuid() != 0 {
		testSetupErr = errors.New("needs root (runc, mounts, loop devices, cgroups)")
		return m.Run()
	}
	if _, err := exec.LookPath("runc"); err != nil {
		testSetupErr = fmt.Errorf("needs runc: %w", err)
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "cove-runtime-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	testRoot = dir
	testSetupErr = setupRoot(dir)
	code := m.Run()
	if testSetupErr == nil {
		if err := removeCgroup(context.Background(), testCgroup); err != nil {
			fmt.Fprintln(os.Stderr, "remove test cgroup parent:", err)
			code = 1
		}
	}
	return code
}

func setupRoot(dir string) error {
	// The sandbox's mapped root must traverse to its rootfs and the agent.
	if err := os.Chmod(dir, 0o711); err != nil {
		return err
	}
	testAgent = filepath.Join(dir, "cove-agent")
	build := exec.Command("go", "build", "-o", testAgent, "github.com/cove-dev/cove/cmd/cove-agent")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("build cove-agent: %w: %s", err, out)
	}
	if _, err := os.Stat(image.BusyboxPath); err != nil {
		return fmt.Errorf("needs busybox-static: %w", err)
	}
	img, err := image.BuildBusybox(context.Background(), filepath.Join(dir, "images"), "busybox")
	if err != nil {
		return err
	}
	testImage = img
	// A probe of the seccomp filter, in the image.
	probe := filepath.Join(img.Rootfs, "bin/syscalls")
	if _, err := os.Stat(probe); err != nil {
		build := exec.Command("go", "build", "-o", probe, "./testdata/syscalls")
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			return fmt.Errorf("build syscalls probe: %w: %s", err, out)
		}
	}
	var b [4]byte
	rand.Read(b[:])
	testCgroup = "/cove-test-" + hex.EncodeToString(b[:])
	return nil
}

// newRuntime returns a Runtime over fresh directories.
func newRuntime(t testing.TB) *Runtime {
	t.Helper()
	if testSetupErr != nil {
		t.Skip(testSetupErr)
	}
	base, err := os.MkdirTemp(testRoot, "rt")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o711); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	if _, bench := t.(*testing.B); !bench {
		log = slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	r, err := New(Config{
		StateDir:     filepath.Join(base, "state"),
		AgentPath:    testAgent,
		CgroupParent: testCgroup,
	}, log)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

var sandboxSeq atomic.Int64

func testSpec() Spec {
	return Spec{
		ID:        fmt.Sprintf("sb-%d-%d", os.Getpid(), sandboxSeq.Add(1)),
		Image:     testImage,
		CPUs:      1,
		MemoryMiB: 256,
		DiskMiB:   32,
		Pids:      256,
	}
}

// start starts a sandbox and destroys it when the test ends.
func start(t testing.TB, r *Runtime, s Spec) *client.Client {
	t.Helper()
	c, err := r.Start(t.Context(), s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		if err := r.Destroy(context.Background(), s.ID); err != nil {
			t.Error(err)
		}
	})
	return c
}

// run runs argv in the sandbox as uid:gid and returns its output.
func run(t testing.TB, c *client.Client, uid int, argv ...string) (stdout, stderr string, exit wire.ExitData) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	id := fmt.Sprintf("cmd_%d", sandboxSeq.Add(1))
	_, err := c.Exec(ctx, wire.ExecRequest{
		ID: id, Argv: argv, Cwd: "/", UID: uid, GID: uid,
		Env: []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"},
	})
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.Output(ctx, id, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var out, errOut bytes.Buffer
	for {
		f, err := s.Next()
		if err == io.EOF {
			return out.String(), errOut.String(), exit
		}
		if err != nil {
			t.Fatal(err)
		}
		switch f.Kind {
		case wire.FrameStdout:
			out.Write(f.Data)
		case wire.FrameStderr:
			errOut.Write(f.Data)
		case wire.FrameExit:
			if exit, err = wire.ParseExit(f.Data); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func sh(t testing.TB, c *client.Client, uid int, script string) (string, wire.ExitData) {
	t.Helper()
	out, errOut, exit := run(t, c, uid, append(append([]string(nil), testImage.Shell...), script)...)
	return strings.TrimSpace(out + errOut), exit
}

// alive reports whether pid runs (a zombie waiting for its reaper does not).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	_, after, _ := strings.Cut(string(b), ") ")
	return !strings.HasPrefix(after, "Z") && !strings.HasPrefix(after, "X")
}

// checkGone checks that nothing of sandbox id is left anywhere.
func checkGone(t *testing.T, r *Runtime, id string) {
	t.Helper()
	dir := r.StateDir(id)
	if _, err := os.Lstat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("state dir %s: still there (%v)", dir, err)
	}
	if m, err := mountinfo.Under(dir); err != nil || len(m) > 0 {
		t.Errorf("mounts under %s: %v %v", dir, m, err)
	}
	if dirs, err := cgroupDirs(r.cgroupPath(id)); err != nil || len(dirs) > 0 {
		t.Errorf("cgroups left: %v %v", dirs, err)
	}
	if known, err := r.runc.known(id); known || err != nil {
		t.Errorf("runc's directory of %s: still there (%v)", id, err)
	}
	ids, err := r.runc.list(t.Context())
	if err != nil {
		t.Error(err)
	}
	for _, x := range ids {
		if x == id {
			t.Errorf("runc still lists %s", id)
		}
	}
	out, err := exec.Command("losetup", "-j", filepath.Join(dir, diskImage)).CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("losetup -j: %s %v", out, err)
	}
	// A loop device clears itself when its mount's last reference goes,
	// and a process of another test that copied the host's mounts into a
	// namespace of its own (ip netns exec, unshare -m) holds one until it
	// ends: wait for that, not for ever.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		devs, err := loopsBackedBy(filepath.Join(dir, diskImage))
		if err == nil && len(devs) == 0 {
			break
		}
		if err != nil || time.Now().After(deadline) {
			t.Errorf("loop devices left: %v %v", devs, err)
			break
		}
	}
}

func TestStartDestroy(t *testing.T) {
	r := newRuntime(t)
	s := testSpec()
	c, err := r.Start(t.Context(), s)
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.Ping(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if p.Version != wire.Version {
		t.Errorf("ping version %d", p.Version)
	}
	st, err := r.State(t.Context(), s.ID)
	if err != nil || st.Status != "running" || st.PID <= 0 {
		t.Fatalf("State = %+v, %v", st, err)
	}
	// runc keeps the container in a directory named for it, which spares
	// starting runc to ask about a container that is gone.
	if known, err := r.runc.known(s.ID); !known || err != nil {
		t.Fatalf("runc's directory of a running container: %v %v", known, err)
	}
	// The processes of the sandbox are in its cgroup.
	dirs, err := cgroupDirs(r.cgroupPath(s.ID))
	if err != nil || len(dirs) == 0 {
		t.Fatalf("cgroup dirs: %v %v", dirs, err)
	}

	for _, tt := range []struct {
		name   string
		uid    int
		script string
		want   string
	}{
		{"root id", 0, "id -u; id -g", "0\n0"},
		{"user id", 1000, "id -u; id -g", "1000\n1000"},
		{"hostname", 0, "hostname", s.ID},
		{"pid 1 is the agent", 0, "cat /proc/1/cmdline | tr '\\0' ' '", "/.cove/cove-agent --workdir /workspace"},
		{"uid map", 0, "cat /proc/self/uid_map | tr -s ' '", "0 1000000 65536"},
		{"only loopback", 0, "ls /sys/class/net", "lo"},
		{"no new privileges", 0, "grep NoNewPrivs /proc/self/status | tr -d '\\t '", "NoNewPrivs:1"},
		{"docker's capabilities but CAP_NET_RAW", 0, "grep -E 'Cap(Eff|Bnd|Amb)' /proc/self/status | tr -d '\t'", "CapEff:00000000a80405fb\nCapBnd:00000000a80405fb\nCapAmb:0000000000000000"},
		{"user has no capabilities", 1000, "grep CapEff /proc/self/status | tr -d '\t'", "CapEff:0000000000000000"},
		{"seccomp filter", 0, "grep Seccomp: /proc/self/status | tr -d '\\t '", "Seccomp:2"},
		{"nofile limit", 0, "ulimit -n", fmt.Sprint(r.nofile())},
		{"mount denied", 0, "mount -t tmpfs none /mnt 2>&1; echo rc=$?", "mount: permission denied (are you root?)\nrc=1"},
		{"agent read-only", 0, "{ echo x > /.cove/cove-agent; } 2>&1; echo rc=$?", "/bin/sh: can't create /.cove/cove-agent: Read-only file system\nrc=1"},
		{"proc masked", 0, "wc -c < /proc/timer_list", "0"},
		{"proc read-only", 0, "{ echo 1 > /proc/sys/kernel/domainname; } 2>&1; echo rc=$?", "/bin/sh: can't create /proc/sys/kernel/domainname: Read-only file system\nrc=1"},
		{"sys read-only", 0, "touch /sys/x 2>&1; echo rc=$?", "touch: /sys/x: Read-only file system\nrc=1"},
		{"workspace owned by user", 0, "stat -c %u:%g /workspace", "1000:1000"},
		{"user writes workspace", 1000, "echo hi > /workspace/f && cat /workspace/f", "hi"},
		{"user cannot write /etc", 1000, "{ echo x >> /etc/passwd; } 2>/dev/null; echo rc=$?", "rc=1"},
		{"commands do not inherit the agent's environment", 0, "echo ${GOMAXPROCS:-unset}", "unset"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, exit := sh(t, c, tt.uid, tt.script)
			if got != tt.want {
				t.Errorf("%q as %d: got %q (exit %+v), want %q", tt.script, tt.uid, got, exit, tt.want)
			}
		})
	}

	// The agent runs Go code on as many threads as the sandbox has CPUs.
	if env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", st.PID)); err != nil || !slices.Contains(strings.Split(string(env), "\x00"), "GOMAXPROCS=1") {
		t.Errorf("the agent's environment %q (%v); want GOMAXPROCS=1 for one CPU", env, err)
	}

	// Limits reach the cgroups.
	for _, f := range []struct{ file, want string }{
		{"memory/memory.limit_in_bytes", "268435456"},
		{"pids/pids.max", "256"},
		{"memory/memory.memsw.limit_in_bytes", map[bool]string{true: "268435456", false: "9223372036854771712"}[r.swapLimit()]},
		{"cpu/cpu.cfs_quota_us", "100000"},
	} {
		b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup", filepath.Dir(f.file), r.cgroupPath(s.ID), filepath.Base(f.file)))
		if err != nil {
			t.Errorf("read %s: %v", f.file, err)
			continue
		}
		if got := strings.TrimSpace(string(b)); got != f.want {
			t.Errorf("%s = %s, want %s", f.file, got, f.want)
		}
	}

	c.Close()
	pid := st.PID
	if err := r.Destroy(t.Context(), s.ID); err != nil {
		t.Fatal(err)
	}
	if alive(pid) {
		t.Errorf("agent pid %d still alive", pid)
	}
	checkGone(t, r, s.ID)
	// Destroying again is no error.
	if err := r.Destroy(t.Context(), s.ID); err != nil {
		t.Errorf("second Destroy: %v", err)
	}
	if ids, err := r.List(t.Context()); err != nil || len(ids) > 0 {
		t.Errorf("List = %v, %v", ids, err)
	}
}

// TestSetID: a sandbox with SetID runs without no_new_privs and with its
// root filesystem mounted without nosuid, and keeps everything else that
// holds root in: the same capabilities, the seccomp filter, its own uid
// range, no mounts. One without is as TestStartDestroy checks.
func TestSetID(t *testing.T) {
	r := newRuntime(t)
	for _, setID := range []bool{false, true} {
		t.Run(fmt.Sprint(setID), func(t *testing.T) {
			s := testSpec()
			s.SetID = setID
			c := start(t, r, s)
			nnp, nosuid := "NoNewPrivs:1", "nosuid"
			if setID {
				nnp, nosuid = "NoNewPrivs:0", ""
			}
			for _, tt := range []struct {
				uid          int
				script, want string
			}{
				{1000, "grep NoNewPrivs /proc/self/status | tr -d '\\t '", nnp},
				{0, "grep NoNewPrivs /proc/self/status | tr -d '\\t '", nnp},
				{0, `awk '$5 == "/" {print $6}' /proc/self/mountinfo | tr , '\n' | grep -x nosuid`, nosuid},
				{0, "grep -E 'Cap(Eff|Bnd)' /proc/self/status | tr -d '\t'", "CapEff:00000000a80405fb\nCapBnd:00000000a80405fb"},
				{0, "grep Seccomp: /proc/self/status | tr -d '\\t '", "Seccomp:2"},
				{0, "cat /proc/self/uid_map | tr -s ' '", "0 1000000 65536"},
				{0, "mount -t tmpfs none /mnt 2>&1; echo rc=$?", "mount: permission denied (are you root?)\nrc=1"},
				{0, "{ echo x > /.cove/cove-agent; } 2>&1; echo rc=$?", "/bin/sh: can't create /.cove/cove-agent: Read-only file system\nrc=1"},
			} {
				if got, exit := sh(t, c, tt.uid, tt.script); got != tt.want {
					t.Errorf("%q as %d: got %q (exit %+v), want %q", tt.script, tt.uid, got, exit, tt.want)
				}
			}
		})
	}
}

// TestSeccomp runs the probe of testdata/syscalls in a sandbox, as root and
// as user: every call the filter closes fails with EPERM (clone3 with
// ENOSYS, so that libc falls back to clone) where the kernel alone would
// answer otherwise, and what programs need goes through.
func TestSeccomp(t *testing.T) {
	r := newRuntime(t)
	c := start(t, r, testSpec())
	want := map[string]string{
		// Namespaces: none, by any call.
		"unshare(0)":              "EPERM",
		"unshare(NEWUSER|NEWNET)": "EPERM",
		"setns":                   "EPERM",
		"clone(NEWUSER|NEWNET)":   "EPERM",
		"clone(NEWUSER|THREAD)":   "EPERM",
		"clone(NEWNS|THREAD)":     "EPERM",
		"clone(NEWCGROUP|THREAD)": "EPERM",
		"clone(NEWUTS|THREAD)":    "EPERM",
		"clone(NEWIPC|THREAD)":    "EPERM",
		"clone(NEWPID|THREAD)":    "EPERM",
		"clone(NEWNET|THREAD)":    "EPERM",
		"clone3(NEWUSER)":         "ENOSYS",
		"clone3(0)":               "ENOSYS",
		// Processes and threads: clone without namespace flags reaches
		// the kernel (which refuses CLONE_THREAD without CLONE_SIGHAND).
		"clone(THREAD)":                  "EINVAL",
		"clone(SIGCHLD)":                 "ok",
		"fork":                           "ok",
		"thread":                         "ok",
		"ptrace(TRACEME)":                "ok",
		"personality(0xffffffff)":        "ok",
		"personality(0)":                 "ok",
		"personality(ADDR_NO_RANDOMIZE)": "EPERM",
		"personality(READ_IMPLIES_EXEC)": "EPERM",
		// Sockets: the kernel refuses a bad type with EINVAL before it
		// looks at the family, so EPERM there is the filter's.
		"socket(AF_INET)":           "ok",
		"socket(AF_INET6)":          "ok",
		"socket(AF_UNIX)":           "ok",
		"socket(AF_NETLINK)":        "ok",
		"socketpair(AF_UNIX)":       "ok",
		"socket(AF_INET, bad type)": "EINVAL",
		// No CAP_NET_RAW, for root too.
		"socket(AF_INET, SOCK_RAW)":   "EPERM",
		"socket(AF_VSOCK)":            "EPERM",
		"socket(AF_VSOCK, bad type)":  "EPERM",
		"socket(AF_ALG, bad type)":    "EPERM",
		"socket(AF_PACKET)":           "EPERM",
		"socket(AF_PACKET, bad type)": "EPERM",
		"socketpair(AF_TIPC)":         "EPERM",
		// Kernel interfaces a sandbox has no use for.
		"keyctl":            "EPERM",
		"add_key":           "EPERM",
		"request_key":       "EPERM",
		"bpf":               "EPERM",
		"perf_event_open":   "EPERM",
		"userfaultfd":       "EPERM",
		"open_by_handle_at": "EPERM",
		"name_to_handle_at": "EPERM",
		"kexec_load":        "EPERM",
		"kexec_file_load":   "EPERM",
		"mount":             "EPERM",
		"umount2":           "EPERM",
		"open_tree":         "EPERM",
		"io_uring_setup":    "EPERM",
		"io_uring_enter":    "EPERM",
		"io_uring_register": "EPERM",
		"init_module":       "EPERM",
		"pidfd_getfd":       "EPERM",
		"modify_ldt":        "EPERM",
		"getpid":            "ok",
		"uname":             "ok",
	}
	// The 32-bit and x32 entry points are closed whatever the host's
	// kernel offers. Where the host itself takes no such call (no IA-32
	// emulation, no x32 ABI) and the sandbox gets the kernel's answer, the
	// sandbox cannot show the filter's part.
	closed := map[string]bool{"SIGSYS": true, "EPERM": true, "ENOSYS": true}
	host, err := exec.Command(filepath.Join(testImage.Rootfs, "bin/syscalls"), "entry").CombinedOutput()
	if err != nil {
		t.Fatalf("probe on the host: %v: %s", err, host)
	}
	entry := parseProbe(t, string(host))
	for _, uid := range []int{0, 1000} {
		t.Run(fmt.Sprintf("uid %d", uid), func(t *testing.T) {
			out, errOut, exit := run(t, c, uid, "/bin/syscalls")
			if exit.ExitCode != 0 || errOut != "" {
				t.Fatalf("probe: exit %+v, stderr %q", exit, errOut)
			}
			got := parseProbe(t, out)
			for name, w := range want {
				if got[name] != w {
					t.Errorf("%s = %q, want %s", name, got[name], w)
				}
			}
			for name, g := range got {
				onHost, isEntry := entry[name]
				switch {
				case isEntry && g == "SIGSYS":
					// Only a seccomp filter answers a call with SIGSYS.
				case isEntry && onHost != "ok":
					t.Logf("%s: %s in the sandbox; the host answers %s, so this shows nothing of the filter", name, g, onHost)
				case isEntry && !closed[g]:
					t.Errorf("%s = %q (on the host: %s), want SIGSYS, EPERM or ENOSYS", name, g, onHost)
				case !isEntry && want[name] == "":
					t.Errorf("probe case %q has no expectation", name)
				}
			}
		})
	}
}

// parseProbe reads the "case: result" lines of testdata/syscalls.
func parseProbe(t *testing.T, out string) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		name, res, ok := strings.Cut(line, ": ")
		if !ok {
			t.Fatalf("probe line %q", line)
		}
		m[name] = res
	}
	return m
}

func TestDiskLimit(t *testing.T) {
	r := newRuntime(t)
	s := testSpec()
	s.DiskMiB = 16
	c := start(t, r, s)
	// The disk's loop device does direct I/O on its image.
	devs, err := loopsBackedBy(filepath.Join(r.StateDir(s.ID), diskImage))
	if err != nil || len(devs) != 1 {
		t.Fatalf("loops of the disk: %v %v", devs, err)
	}
	if dio, err := os.ReadFile(filepath.Join("/sys/block", filepath.Base(devs[0]), "loop", "dio")); err != nil || string(bytes.TrimSpace(dio)) != "1" {
		t.Errorf("%s dio = %q %v; want 1", devs[0], dio, err)
	}
	// 24 MiB into a 16 MiB disk.
	out, exit := sh(t, c, 1000, "dd if=/dev/zero of=/workspace/big bs=1M count=24 2>&1; echo rc=$?")
	if !strings.Contains(out, "No space left on device") || !strings.HasSuffix(out, "rc=1") {
		t.Errorf("dd past the disk: %q (exit %+v)", out, exit)
	}
	// Root in the sandbox cannot reach the agent's log through
	// /proc/1/fd/1: the agent is not dumpable, as its binary belongs to a
	// uid outside the sandbox's user namespace. Were it reachable, the log
	// is on the sandbox's disk and held by the same quota.
	sh(t, c, 0, "rm /workspace/big")
	out, exit = sh(t, c, 0, "dd if=/dev/zero of=/proc/1/fd/1 bs=1M count=24 2>&1; echo rc=$?")
	if !strings.Contains(out, "Permission denied") && !strings.Contains(out, "No space left on device") || !strings.HasSuffix(out, "rc=1") {
		t.Errorf("dd into the agent's log: %q (exit %+v)", out, exit)
	}
	// The image's files are untouched by the sandbox's writes.
	out, _ = sh(t, c, 0, "rm /bin/ls && echo removed")
	if out != "removed" {
		t.Errorf("rm /bin/ls: %q", out)
	}
	if _, err := os.Lstat(filepath.Join(testImage.Rootfs, "bin/ls")); err != nil {
		t.Errorf("image lost /bin/ls: %v", err)
	}
}

func TestStartFailureCleansUp(t *testing.T) {
	r := newRuntime(t)
	tests := []struct {
		name   string
		change func(s *Spec)
		code   api.Code
	}{
		{"no image rootfs", func(s *Spec) { s.Image.Rootfs = filepath.Join(testRoot, "nowhere") }, api.CodeInternal},
		{"bad id", func(s *Spec) { s.ID = "../x" }, api.CodeInvalidArgument},
		{"no disk", func(s *Spec) { s.DiskMiB = 0 }, api.CodeInvalidArgument},
		{"agent fails", func(s *Spec) { s.Workdir = "relative" }, api.CodeInvalidArgument},
		// The agent starts and exits at once: its workdir is a file.
		{"agent exits", func(s *Spec) { s.Workdir = "/etc/passwd" }, api.CodeInternal},
		// runc itself fails: a memory limit below what the kernel accepts.
		{"runc fails", func(s *Spec) { s.Pids = 1 << 62 }, api.CodeInternal},
		{"too few pids", func(s *Spec) { s.Pids = 1 }, api.CodeInvalidArgument},
		{"too little cpu", func(s *Spec) { s.CPUs = 0.001 }, api.CodeInvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := testSpec()
			tt.change(&s)
			start := time.Now()
			c, err := r.Start(t.Context(), s)
			if err == nil {
				c.Close()
				r.Destroy(t.Context(), s.ID)
				t.Skip("Start did not fail")
			}
			t.Logf("Start failed in %v: %v", time.Since(start).Round(time.Millisecond), err)
			if code := api.ErrorCode(err); code != tt.code {
				t.Errorf("code %s, want %s", code, tt.code)
			}
			if ValidID(s.ID) {
				checkGone(t, r, s.ID)
			}
		})
	}
	// A sandbox that exists is a conflict, and is left alone.
	s := testSpec()
	start(t, r, s)
	if _, err := r.Start(t.Context(), s); api.ErrorCode(err) != api.CodeConflict {
		t.Errorf("second Start: %v, want a conflict", err)
	}
	if _, err := r.Attach(t.Context(), s.ID); err != nil {
		t.Errorf("Attach after refused Start: %v", err)
	}
}

// TestStartCancelled cancels Start at various points: whatever it had
// done is undone.
func TestStartCancelled(t *testing.T) {
	r := newRuntime(t)
	for _, after := range []time.Duration{0, time.Millisecond, 5 * time.Millisecond, 15 * time.Millisecond, 30 * time.Millisecond, 45 * time.Millisecond} {
		t.Run(after.String(), func(t *testing.T) {
			s := testSpec()
			ctx, cancel := context.WithTimeout(t.Context(), after)
			defer cancel()
			c, err := r.Start(ctx, s)
			if err == nil {
				c.Close()
				if err := r.Destroy(t.Context(), s.ID); err != nil {
					t.Fatal(err)
				}
			} else {
				t.Logf("Start: %v", err)
			}
			checkGone(t, r, s.ID)
		})
	}
}

func TestAttachAfterRestart(t *testing.T) {
	r := newRuntime(t)
	s := testSpec()
	c := start(t, r, s)
	if out, _ := sh(t, c, 0, "echo kept > /tmp/mark && cat /tmp/mark"); out != "kept" {
		t.Fatalf("mark: %q", out)
	}
	c.Close()

	// A new Runtime over the same directories, as after a restart of cove.
	r2, err := New(r.Config(), r.log)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := r2.List(t.Context())
	if err != nil || len(ids) != 1 || ids[0] != s.ID {
		t.Fatalf("List = %v, %v", ids, err)
	}
	c2, err := r2.Attach(t.Context(), s.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if out, _ := sh(t, c2, 0, "cat /tmp/mark"); out != "kept" {
		t.Errorf("mark after attach: %q", out)
	}

	if _, err := r2.Attach(t.Context(), "nosuch"); api.ErrorCode(err) != api.CodeNotFound {
		t.Errorf("Attach(nosuch) = %v, want not found", err)
	}
}

func TestAttachStopped(t *testing.T) {
	r := newRuntime(t)
	s := testSpec()
	c := start(t, r, s)
	c.Close()
	st, err := r.State(t.Context(), s.ID)
	if err != nil {
		t.Fatal(err)
	}
	// The agent dies (as after a reboot): Attach says so, Destroy cleans.
	if err := exec.Command("kill", "-KILL", fmt.Sprint(st.PID)).Run(); err != nil {
		t.Fatal(err)
	}
	waitExit(t.Context(), st.PID, 5*time.Second)
	if _, err := r.Attach(t.Context(), s.ID); api.ErrorCode(err) != api.CodePreconditionFailed {
		t.Errorf("Attach of a stopped sandbox = %v, want precondition failed", err)
	}
	if err := r.Destroy(t.Context(), s.ID); err != nil {
		t.Fatal(err)
	}
	checkGone(t, r, s.ID)
}

// TestDestroyHalfStarted destroys what an interrupted Start can leave: a
// mounted disk and overlay, no runc container.
func TestDestroyHalfStarted(t *testing.T) {
	r := newRuntime(t)
	s := testSpec().withDefaults()
	dir := r.StateDir(s.ID)
	if err := os.MkdirAll(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	if err := r.makeRootfs(t.Context(), dir, s); err != nil {
		t.Fatal(err)
	}
	if m, _ := mountinfo.Under(dir); len(m) != 2 {
		t.Fatalf("mounts under %s: %v", dir, m)
	}
	if err := r.Destroy(t.Context(), s.ID); err != nil {
		t.Fatal(err)
	}
	checkGone(t, r, s.ID)
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"good", Config{StateDir: "/var/lib/cove/sandboxes", AgentPath: "/usr/lib/cove/cove-agent"}, true},
		{"relative state", Config{StateDir: "state", AgentPath: "/a"}, false},
		{"no agent", Config{StateDir: "/s"}, false},
		{"comma", Config{StateDir: "/s,x", AgentPath: "/a"}, false},
		{"bad cgroup", Config{StateDir: "/s", AgentPath: "/a", CgroupParent: "cove"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg.WithDefaults()
			if err := cfg.Validate(); (err == nil) != tt.ok {
				t.Errorf("Validate = %v, want ok %v", err, tt.ok)
			}
		})
	}
	cfg := Config{StateDir: "/var/lib/cove/sandboxes"}.WithDefaults()
	if cfg.RuncRoot != "/var/lib/cove/runc" || cfg.RuncPath != "runc" || cfg.CgroupParent != "/cove" {
		t.Errorf("defaults: %+v", cfg)
	}
}

// TestManagedImage runs the managed Debian image (built by debootstrap, a
// minute of downloads). It runs only with COVE_TEST_MANAGED=1; set
// COVE_TEST_IMAGES to a lasting directory to build it once.
func TestManagedImage(t *testing.T) {
	if os.Getenv("COVE_TEST_MANAGED") != "1" {
		t.Skip("set COVE_TEST_MANAGED=1 to debootstrap and run the managed image")
	}
	r := newRuntime(t)
	dir := os.Getenv("COVE_TEST_IMAGES")
	if dir == "" {
		dir = filepath.Join(testRoot, "images")
	}
	img, err := image.EnsureManaged(t.Context(), dir, t.Output(), r.log)
	if err != nil {
		t.Fatal(err)
	}
	s := testSpec()
	s.Image = img
	s.DiskMiB = 256
	t0 := time.Now()
	c := start(t, r, s)
	t.Logf("managed sandbox started in %v", time.Since(t0))
	for _, tt := range []struct {
		name   string
		uid    int
		script string
		want   string
	}{
		{"user", 1000, "id -un; pwd", "user\n/"},
		{"tools", 1000, "python3 -c 'print(6*7)'; node -e 'console.log(6*7)'; git --version | cut -d' ' -f1-2; bash --version | head -1 | cut -d' ' -f1-2", "42\n42\ngit version\nGNU bash,"},
		{"root", 0, "id -un", "root"},
		{"setuid kept", 0, "stat -c %A /usr/bin/su", "-rwsr-xr-x"},
		{"ps", 0, "ps -o pid= -p 1 | tr -d ' '", "1"},
		{"workspace", 1000, "cd /workspace && git init -q && echo ok", "ok"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			out, errOut, exit := run(t, c, tt.uid, append(append([]string(nil), img.Shell...), tt.script)...)
			if got := strings.TrimSpace(out); got != tt.want || exit.ExitCode != 0 {
				t.Errorf("%q: got %q (stderr %q, exit %+v), want %q", tt.script, got, errOut, exit, tt.want)
			}
		})
	}
}

func TestStateDirNotSearchable(t *testing.T) {
	r := newRuntime(t)
	private := filepath.Join(filepath.Dir(r.cfg.StateDir), "private")
	if err := os.Mkdir(private, 0o700); err != nil {
		t.Fatal(err)
	}
	cfg := r.Config()
	cfg.StateDir = filepath.Join(private, "state")
	r2, err := New(cfg, r.log)
	if err != nil {
		t.Fatal(err)
	}
	s := testSpec()
	if _, err := r2.Start(t.Context(), s); err == nil || !strings.Contains(err.Error(), "cannot search") {
		t.Errorf("Start under a 0700 dir = %v, want a cannot search error", err)
	}
	checkGone(t, r2, s.ID)
}

func TestConcurrentSandboxes(t *testing.T) {
	r := newRuntime(t)
	const n = 6
	specs := make([]Spec, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range specs {
		specs[i] = testSpec()
		wg.Go(func() {
			c, err := r.Start(t.Context(), specs[i])
			if err == nil {
				_, err = c.Ping(t.Context())
				c.Close()
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i := range specs {
		if errs[i] != nil {
			t.Errorf("sandbox %d: %v", i, errs[i])
		}
	}
	for i := range specs {
		wg.Go(func() { errs[i] = r.Destroy(context.Background(), specs[i].ID) })
	}
	wg.Wait()
	for i := range specs {
		if errs[i] != nil {
			t.Errorf("destroy %d: %v", i, errs[i])
		}
		checkGone(t, r, specs[i].ID)
	}
}

// hostOwner returns the host uid and gid of path.
func hostOwner(t *testing.T, path string) (uid, gid uint32) {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Uid, st.Gid
}

// procUID returns the real uid of host process pid, from its status.
func procUID(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, "Uid:"); ok {
			return strings.Fields(rest)[0]
		}
	}
	t.Fatalf("no Uid in /proc/%d/status", pid)
	return ""
}

// TestOwnRanges: two sandboxes with ranges of their own share one image
// tree on disk, seen through idmapped mounts. Each one's processes and
// files are its own host uids; root in one changes an image file and the
// other, and the tree on disk, do not see it.
func TestOwnRanges(t *testing.T) {
	r := newRuntime(t)
	passwd, err := os.ReadFile(filepath.Join(testImage.Rootfs, "etc/passwd"))
	if err != nil {
		t.Fatal(err)
	}
	specs := []Spec{testSpec(), testSpec()}
	specs[0].IDs = image.IDMap{HostID: 1 << 30, Size: 65536}
	specs[1].IDs = image.IDMap{HostID: 1<<30 + 65536, Size: 65536}
	var clients []*client.Client
	for _, s := range specs {
		clients = append(clients, start(t, r, s))
	}
	a, b := clients[0], clients[1]
	for i, c := range clients {
		host := specs[i].IDs.HostID
		if out, _ := sh(t, c, 0, "cat /proc/self/uid_map /proc/self/gid_map | tr -s ' '"); out != fmt.Sprintf("0 %d 65536\n 0 %d 65536", host, host) {
			t.Errorf("sandbox %d maps %q", i, out)
		}
		if out, _ := sh(t, c, 0, "stat -c %u:%g /etc/passwd /workspace"); out != "0:0\n1000:1000" {
			t.Errorf("sandbox %d sees the image's owners as %q", i, out)
		}
		st, err := r.State(t.Context(), specs[i].ID)
		if err != nil {
			t.Fatal(err)
		}
		if uid := procUID(t, st.PID); uid != fmt.Sprint(host) {
			t.Errorf("sandbox %d's agent runs as host uid %s, want %d", i, uid, host)
		}
	}
	if out, exit := sh(t, a, 0, "echo mine > /root/a && echo changed >> /etc/passwd && echo u > /workspace/u && chown 1000:1000 /workspace/u"); exit.ExitCode != 0 {
		t.Fatalf("write in sandbox a: %s", out)
	}
	upper := filepath.Join(r.StateDir(specs[0].ID), diskDir, "upper")
	for _, c := range []struct {
		path     string
		uid, gid uint32
	}{
		{"root/a", 1 << 30, 1 << 30},
		{"etc/passwd", 1 << 30, 1 << 30}, // copied up with its owner mapped
		{"workspace", 1<<30 + 1000, 1<<30 + 1000},
		{"workspace/u", 1<<30 + 1000, 1<<30 + 1000},
	} {
		if uid, gid := hostOwner(t, filepath.Join(upper, c.path)); uid != c.uid || gid != c.gid {
			t.Errorf("host owner of a's /%s: %d:%d, want %d:%d", c.path, uid, gid, c.uid, c.gid)
		}
	}
	if out, _ := sh(t, b, 0, "grep -c changed /etc/passwd; ls /root/a 2>&1"); out != "0\nls: /root/a: No such file or directory" {
		t.Errorf("sandbox b sees a's writes: %q", out)
	}
	if out, _ := sh(t, b, 0, "echo theirs > /root/a && cat /root/a"); out != "theirs" {
		t.Errorf("b writes /root/a: %q", out)
	}
	if uid, _ := hostOwner(t, filepath.Join(r.StateDir(specs[1].ID), diskDir, "upper", "root/a")); uid != 1<<30+65536 {
		t.Errorf("host owner of b's /root/a: %d", uid)
	}
	after, err := os.ReadFile(filepath.Join(testImage.Rootfs, "etc/passwd"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(after, passwd) {
		t.Errorf("the image's /etc/passwd changed on disk:\n%s", after)
	}
	if uid, gid := hostOwner(t, filepath.Join(testImage.Rootfs, "etc/passwd")); uid != 0 || gid != 0 {
		t.Errorf("the image's /etc/passwd is %d:%d on disk", uid, gid)
	}
	// Nothing of the image's view stays attached beside the overlay.
	if m, err := mountinfo.Under(filepath.Join(r.StateDir(specs[0].ID), lowerDir)); err != nil || len(m) > 0 {
		t.Errorf("mounts under lower/: %v %v", m, err)
	}
}

// TestStateFromInitRecord: State answers from the init Start recorded
// while that process runs, the same PID runc reports; a record that names
// another process (a reused PID: another start time) or an ended init is
// not believed, and runc answers.
func TestStateFromInitRecord(t *testing.T) {
	r := newRuntime(t)
	s := testSpec()
	c := start(t, r, s)
	c.Close()
	dir := r.StateDir(s.ID)
	runcSt, ok, err := r.runc.state(t.Context(), s.ID)
	if err != nil || !ok {
		t.Fatalf("runc state: %v %v", ok, err)
	}
	pid, ok := livePID(dir)
	if !ok || pid != runcSt.PID {
		t.Fatalf("livePID = %d, %v; runc says %d", pid, ok, runcSt.PID)
	}
	st, err := r.State(t.Context(), s.ID)
	if err != nil || st.Status != "running" || st.PID != runcSt.PID {
		t.Fatalf("State = %+v, %v; want running, PID %d", st, err, runcSt.PID)
	}
	// A record naming this test's process, as if the init's PID were
	// reused by it: not the init, however alive.
	start, _, err := procStart(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, initFile), fmt.Appendf(nil, "%d %d\n", os.Getpid(), start+1), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, ok := livePID(dir); ok {
		t.Fatal("a record of another start time is believed")
	}
	if st, err := r.State(t.Context(), s.ID); err != nil || st.PID != runcSt.PID {
		t.Fatalf("State with a stale record = %+v, %v; want runc's PID %d", st, err, runcSt.PID)
	}
	if err := r.SetHostname(t.Context(), s.ID, "renamed"); err != nil {
		t.Fatal(err)
	}
	// The right record again, then the init ends: stopped, and the
	// hostname cannot be set in whatever has its PID now.
	if err := recordInit(dir); err != nil {
		t.Fatal(err)
	}
	if err := exec.Command("kill", "-KILL", fmt.Sprint(runcSt.PID)).Run(); err != nil {
		t.Fatal(err)
	}
	waitExit(t.Context(), runcSt.PID, 5*time.Second)
	if _, ok := livePID(dir); ok {
		t.Fatal("the record of an ended init is believed")
	}
	if st, err := r.State(t.Context(), s.ID); err != nil || st.PID != 0 {
		t.Fatalf("State after the init ended = %+v, %v; want PID 0", st, err)
	}
	if err := r.SetHostname(t.Context(), s.ID, "again"); api.ErrorCode(err) != api.CodeConflict {
		t.Fatalf("SetHostname of a stopped sandbox = %v, want conflict", err)
	}
}

// TestDiskFromEmptyCopy: a new sandbox's disk is a sparse copy of the
// empty disk of its size, kept in the state directory: the root of each
// copy belongs to its own sandbox's mapped root, what one sandbox writes
// is in neither the other's disk nor the empty one, and no more sizes are
// kept than maxEmptyDisks.
func TestDiskFromEmptyCopy(t *testing.T) {
	r := newRuntime(t)
	a, b := testSpec(), testSpec()
	b.IDs = image.IDMap{HostID: 1_200_000, Size: 65536}
	ca := start(t, r, a)
	empty := r.emptyDiskPath(a.DiskMiB)
	sum := func(p string) string {
		out, err := exec.Command("sha256sum", p).Output()
		if err != nil {
			t.Fatal(err)
		}
		return string(out[:64])
	}
	before := sum(empty)
	if _, _, exit := run(t, ca, 0, "sh", "-c", "head -c 1048576 /dev/urandom > /mine && sync"); exit.ExitCode != 0 {
		t.Fatalf("write: %+v", exit)
	}
	cb := start(t, r, b)
	if out, _, _ := run(t, cb, 0, "sh", "-c", "ls /mine 2>&1; true"); !strings.Contains(out, "No such file") {
		t.Errorf("the second sandbox sees the first one's file: %q", out)
	}
	if after := sum(empty); after != before {
		t.Error("the empty disk changed")
	}
	for _, s := range []Spec{a, b} {
		st, err := os.Stat(filepath.Join(r.StateDir(s.ID), diskDir))
		if err != nil {
			t.Fatal(err)
		}
		if sys := st.Sys().(*syscall.Stat_t); sys.Uid != s.IDs.OrLegacy().HostID || sys.Gid != s.IDs.OrLegacy().HostID {
			t.Errorf("disk root of %s: %d:%d, want its mapped root %d", s.ID, sys.Uid, sys.Gid, s.IDs.OrLegacy().HostID)
		}
		img, err := os.Stat(filepath.Join(r.StateDir(s.ID), diskImage))
		if err != nil {
			t.Fatal(err)
		}
		if used := img.Sys().(*syscall.Stat_t).Blocks * 512; img.Size() != s.DiskMiB<<20 || used > img.Size()/2 {
			t.Errorf("disk of %s: %d bytes, %d used: want %d, sparse", s.ID, img.Size(), used, s.DiskMiB<<20)
		}
	}
	// As many sizes as are kept: another size is made without one.
	for i := range maxEmptyDisks {
		if err := os.WriteFile(r.emptyDiskPath(int64(1000+i)), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	other := filepath.Join(t.TempDir(), "disk.img")
	if err := r.newDisk(t.Context(), other, 48); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(r.emptyDiskPath(48)); err == nil {
		t.Error("an empty disk was kept past maxEmptyDisks")
	}
	if out, err := exec.Command("dumpe2fs", "-h", other).CombinedOutput(); err != nil || !strings.Contains(string(out), "Block count") {
		t.Errorf("disk made past the bound: %v %s", err, out)
	}
}
