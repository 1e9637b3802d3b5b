package runtime

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// closedSyscalls must never be allowed, with any arguments: namespaces,
// mounts, kernel keyrings, bpf, perf, userfaultfd, handle-based opens,
// kexec and modules, io_uring, other processes' descriptors and memory
// advice, raw I/O ports and the LDT, and the host-wide knobs.
var closedSyscalls = []string{
	"unshare", "setns", "clone3",
	"mount", "umount2", "pivot_root", "fsopen", "fsconfig", "fsmount", "fspick",
	"move_mount", "open_tree", "mount_setattr",
	"keyctl", "add_key", "request_key",
	"bpf", "perf_event_open", "userfaultfd",
	"open_by_handle_at", "name_to_handle_at",
	"kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
	"io_uring_setup", "io_uring_enter", "io_uring_register",
	"pidfd_getfd", "kcmp", "process_madvise",
	"iopl", "ioperm", "modify_ldt",
	"reboot", "swapon", "swapoff", "syslog", "acct", "quotactl", "quotactl_fd",
	"settimeofday", "clock_settime", "sethostname", "setdomainname", "vhangup",
	"lookup_dcookie", "uselib", "ustat", "sysfs", "_sysctl", "nfsservctl",
	"fanotify_init", "memfd_secret",
}

func TestSeccompProfile(t *testing.T) {
	sc := ociSpec(Spec{CPUs: 1, MemoryMiB: 256, Pids: 64}, host{}).Linux.Seccomp
	if !slices.Equal(sc.Architectures, []specs.Arch{specs.ArchX86_64}) {
		t.Errorf("architectures %v, want x86_64 alone", sc.Architectures)
	}
	if sc.DefaultAction != specs.ActErrno || sc.DefaultErrnoRet == nil || *sc.DefaultErrnoRet != errnoPerm {
		t.Errorf("default action %s, want EPERM", sc.DefaultAction)
	}

	// Every rule allows, except the one that makes clone3 answer ENOSYS;
	// allowed[name] holds the argument conditions of each allowing rule
	// (an empty list: allowed with any arguments).
	allowed := map[string][][]specs.LinuxSeccompArg{}
	for _, r := range sc.Syscalls {
		switch {
		case r.Action == specs.ActAllow:
			for _, n := range r.Names {
				allowed[n] = append(allowed[n], r.Args)
			}
		case slices.Equal(r.Names, []string{"clone3"}) && r.Action == specs.ActErrno &&
			r.ErrnoRet != nil && *r.ErrnoRet == errnoNoSys && len(r.Args) == 0:
		default:
			t.Errorf("rule %+v: neither an allowing rule nor clone3's ENOSYS", r)
		}
	}
	for _, n := range closedSyscalls {
		if _, ok := allowed[n]; ok {
			t.Errorf("%s is allowed", n)
		}
	}
	for n, conds := range allowed {
		for _, c := range conds {
			if len(c) == 0 && len(conds) > 1 {
				t.Errorf("%s is allowed both with and without conditions", n)
			}
		}
	}

	// The calls allowed with conditions, and only with them.
	values := func(name string) []uint64 {
		var vs []uint64
		for _, c := range allowed[name] {
			if len(c) != 1 || c[0].Index != 0 || c[0].Op != specs.OpEqualTo {
				t.Errorf("%s: condition %+v, want one equality on the first argument", name, c)
				continue
			}
			vs = append(vs, c[0].Value)
		}
		slices.Sort(vs)
		return vs
	}
	if got, want := values("socket"), []uint64{afUnix, afInet, afInet6, afNetlink}; !slices.Equal(got, want) {
		t.Errorf("socket families %v, want %v", got, want)
	}
	if got, want := values("socketpair"), []uint64{afUnix}; !slices.Equal(got, want) {
		t.Errorf("socketpair families %v, want %v", got, want)
	}
	if got, want := values("personality"), []uint64{0, 0x0008, 0x20000, 0x20008, 0xffffffff}; !slices.Equal(got, want) {
		t.Errorf("personalities %v, want %v", got, want)
	}
	// clone: only when flags & every CLONE_NEW* flag == 0.
	const cloneNew = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000
	clone := allowed["clone"]
	if len(clone) != 1 || len(clone[0]) != 1 {
		t.Fatalf("clone rules %+v, want one with one condition", clone)
	}
	if c := clone[0][0]; c.Index != 0 || c.Op != specs.OpMaskedEqual || c.Value&cloneNew != cloneNew || c.ValueTwo != 0 {
		t.Errorf("clone condition %+v, want flags & %#x == 0", c, cloneNew)
	}

	// Every name is an x86_64 system call, and the unconditional list
	// names each once.
	known := x86Syscalls(t)
	names := slices.Clone(closedSyscalls)
	for _, r := range sc.Syscalls {
		names = append(names, r.Names...)
	}
	for _, n := range names {
		if !known[n] {
			t.Errorf("%s: no such x86_64 system call", n)
		}
	}
	seen := map[string]bool{}
	for _, n := range allowedSyscalls {
		if seen[n] {
			t.Errorf("%s listed twice", n)
		}
		seen[n] = true
	}
}

// x86Syscalls reads the x86_64 system call names of golang.org/x/sys.
func x86Syscalls(t *testing.T) map[string]bool {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "golang.org/x/sys").Output()
	if err != nil {
		t.Fatalf("find golang.org/x/sys: %v", err)
	}
	f, err := os.Open(filepath.Join(strings.TrimSpace(string(out)), "unix", "zsysnum_linux_amd64.go"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	re := regexp.MustCompile(`^\s*SYS_([A-Z0-9_]+)\s*=\s*\d+`)
	names := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if m := re.FindStringSubmatch(sc.Text()); m != nil {
			names[strings.ToLower(m[1])] = true
		}
	}
	if err := sc.Err(); err != nil || len(names) < 300 {
		t.Fatalf("read x86_64 system calls: %d names, %v", len(names), err)
	}
	return names
}
