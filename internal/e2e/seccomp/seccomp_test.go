// Package seccomp checks, in sandboxes of a real `cove serve` over the
// managed image, that the seccomp allow-list and the capability set close
// what they must (nested namespaces, odd socket families, raw sockets) and
// leave everyday work alone: Python, Node.js, git, job control, fork and
// exec storms, threads, and ptrace of one's own child.
//
// The filter itself, call by call, is tested by internal/node/runtime
// (TestSeccomp, TestSeccompProfile).
package seccomp

import (
	"strings"
	"testing"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
)

func TestMain(m *testing.M) { e2etest.Main(m) }

// managed starts a server over the managed image and one sandbox in it.
func managed(t *testing.T) (*e2etest.Server, api.Sandbox) {
	t.Helper()
	e2etest.RequireRoot(t)
	if e2etest.ManagedDir() == "" {
		t.Skip("set COVE_TEST_IMAGES to the managed image's directory (make test does)")
	}
	s := e2etest.StartServer(t, e2etest.WithManaged)
	return s, e2etest.Create(t, s.Admin, api.CreateSandboxRequest{})
}

// write puts a file into the sandbox through a shell here-document.
func write(t *testing.T, s *e2etest.Server, sb api.Sandbox, path, content string) {
	t.Helper()
	e2etest.MustOK(t, s.Admin, sb.ID, "cat > "+path+" <<'COVE_EOF'\n"+content+"\nCOVE_EOF")
}

// TestEverydayWorkUnderSeccomp runs, as user, what developers and their
// tools do all day; each must work under the filter.
func TestEverydayWorkUnderSeccomp(t *testing.T) {
	s, sb := managed(t)

	t.Run("python threads, subprocess and multiprocessing", func(t *testing.T) {
		write(t, s, sb, "/tmp/work.py", `
import concurrent.futures, multiprocessing, subprocess, threading

def echo(i):
    return int(subprocess.run(["sh", "-c", "echo %d" % i], capture_output=True, text=True, check=True).stdout)

def square(x):
    return x * x

if __name__ == "__main__":
    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        print(sum(ex.map(echo, range(32))))
    with multiprocessing.Pool(4) as pool:
        print(sum(pool.map(square, range(10))))
    n = []
    ts = [threading.Thread(target=lambda: n.append(1)) for _ in range(16)]
    for th in ts: th.start()
    for th in ts: th.join()
    print(len(n))`)
		if out := e2etest.MustOK(t, s.Admin, sb.ID, "python3 /tmp/work.py"); out != "496\n285\n16\n" {
			t.Errorf("python3: %q, want 496 285 16", out)
		}
	})

	t.Run("node child_process, worker_threads and fs", func(t *testing.T) {
		write(t, s, sb, "/tmp/work.js", `
const { execFileSync } = require('child_process');
const { Worker } = require('worker_threads');
const fs = require('fs');
(async () => {
  const child = execFileSync('sh', ['-c', 'echo child']).toString().trim();
  const answer = await new Promise((resolve, reject) => {
    const w = new Worker('require("worker_threads").parentPort.postMessage(6 * 7)', { eval: true });
    w.on('message', resolve);
    w.on('error', reject);
  });
  await fs.promises.writeFile('/tmp/node.txt', 'written');
  const back = await fs.promises.readFile('/tmp/node.txt', 'utf8');
  console.log(child, answer, back);
})().catch((e) => { console.error(e); process.exit(1); });`)
		if out := e2etest.MustOK(t, s.Admin, sb.ID, "node /tmp/work.js"); out != "child 42 written\n" {
			t.Errorf("node: %q", out)
		}
	})

	t.Run("git init, commit and log", func(t *testing.T) {
		out := e2etest.MustOK(t, s.Admin, sb.ID, `set -e
cd /workspace && git init -q repo && cd repo
git config user.email dev@example.com && git config user.name dev
echo one > f && git add f && git commit -qm first
echo two >> f && git commit -qam second
git log --format=%s`)
		if out != "second\nfirst\n" {
			t.Errorf("git log: %q", out)
		}
	})

	t.Run("bash job control", func(t *testing.T) {
		out := e2etest.MustOK(t, s.Admin, sb.ID, `bash -c 'set -m; sleep 0.2 & jobs; wait; echo done'`)
		if !strings.Contains(out, "Running") || !strings.HasSuffix(out, "done\n") {
			t.Errorf("job control: %q", out)
		}
		// An interactive shell on a terminal of its own (script opens a
		// pty inside the sandbox): process groups, the terminal's
		// foreground group, fg.
		out = e2etest.MustOK(t, s.Admin, sb.ID, `script -qec "bash --norc -ic 'sleep 0.2 & jobs; fg >/dev/null; echo fg=\$?'" /dev/null`)
		if !strings.Contains(out, "Running") || !strings.Contains(out, "fg=0") {
			t.Errorf("interactive job control: %q", out)
		}
	})

	t.Run("fork and exec storm", func(t *testing.T) {
		// 200 short processes from a shell, and 200 from Python's
		// subprocess (vfork, or posix_spawn through clone3 and its
		// fallback), as pip and build tools start compilers.
		out := e2etest.MustOK(t, s.Admin, sb.ID, `n=0; for i in $(seq 200); do /bin/true && n=$((n+1)); done; echo $n
python3 -c 'import subprocess; print(sum(subprocess.run(["true"]).returncode == 0 for _ in range(200)))'`)
		if out != "200\n200\n" {
			t.Errorf("storm: %q", out)
		}
	})

	t.Run("ptrace of its own child", func(t *testing.T) {
		// The managed image has no gdb or strace: Python's ctypes does
		// what they do first. PTRACE_TRACEME in a child that stops,
		// PTRACE_PEEKUSER and PTRACE_CONT from the parent; then
		// PTRACE_ATTACH to a running child and PTRACE_DETACH.
		write(t, s, sb, "/tmp/trace.py", `
import ctypes, os, signal, time
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.restype = ctypes.c_long
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
TRACEME, PEEKUSER, CONT, ATTACH, DETACH = 0, 3, 7, 16, 17

def check(r):
    if r == -1 and ctypes.get_errno() != 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    return r

pid = os.fork()
if pid == 0:
    if libc.ptrace(TRACEME, 0, None, None) != 0:
        os._exit(100)
    os.kill(os.getpid(), signal.SIGSTOP)
    os._exit(7)
_, st = os.waitpid(pid, 0)
assert os.WIFSTOPPED(st) and os.WSTOPSIG(st) == signal.SIGSTOP, st
ctypes.set_errno(0)
check(libc.ptrace(PEEKUSER, pid, None, None))
check(libc.ptrace(CONT, pid, None, None))
_, st = os.waitpid(pid, 0)
print("traceme", os.WEXITSTATUS(st))

pid = os.fork()
if pid == 0:
    time.sleep(60)
    os._exit(0)
check(libc.ptrace(ATTACH, pid, None, None))
_, st = os.waitpid(pid, 0)
assert os.WIFSTOPPED(st), st
check(libc.ptrace(DETACH, pid, None, None))
os.kill(pid, signal.SIGKILL)
os.waitpid(pid, 0)
print("attach ok")`)
		if out := e2etest.MustOK(t, s.Admin, sb.ID, "python3 /tmp/trace.py"); out != "traceme 7\nattach ok\n" {
			t.Errorf("ptrace: %q", out)
		}
	})
}

// TestClosedInSandbox tries, as user and as root, what issue 11 found
// open: a nested user and network namespace, a vsock socket, and (root)
// raw and packet sockets. Each fails with EPERM.
func TestClosedInSandbox(t *testing.T) {
	s, sb := managed(t)
	sock := func(args string) string {
		return `python3 -c 'import socket
try:
    socket.socket(` + args + `)
    print("open")
except PermissionError as e:
    print("EPERM")
except OSError as e:
    print(e)'`
	}
	for _, tt := range []struct {
		name, script, want string
	}{
		{"unshare -Urn", "unshare -Urn true 2>&1; echo rc=$?", "unshare: unshare failed: Operation not permitted\nrc=1\n"},
		{"vsock", sock("socket.AF_VSOCK, socket.SOCK_STREAM"), "EPERM\n"},
		{"alg", sock("socket.AF_ALG, socket.SOCK_SEQPACKET"), "EPERM\n"},
		{"packet", sock("socket.AF_PACKET, socket.SOCK_RAW"), "EPERM\n"},
		{"raw", sock("socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_UDP"), "EPERM\n"},
	} {
		for _, root := range []bool{false, true} {
			name := tt.name + " as user"
			var opts []func(*api.CreateCommandRequest)
			if root {
				name = tt.name + " as root"
				opts = append(opts, e2etest.AsRoot)
			}
			t.Run(name, func(t *testing.T) {
				if out := e2etest.MustOK(t, s.Admin, sb.ID, tt.script, opts...); out != tt.want {
					t.Errorf("%s: %q, want %q", tt.script, out, tt.want)
				}
			})
		}
	}
}
