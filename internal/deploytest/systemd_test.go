package deploytest

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// units are the unit files deploy/systemd holds, by name.
var units = []string{"cove.service", "cove-control.service", "cove-node.service"}

// installedBinary is the path the units run cove from (`make install`).
const installedBinary = "/usr/local/bin/cove"

// directive is one Key=Value line of a unit, in its section.
type directive struct{ section, key, value string }

// readUnit parses a unit file: sections, Key=Value lines, comments.
func readUnit(t *testing.T, name string) []directive {
	t.Helper()
	f, err := os.Open(filepath.Join(repoRoot(t), "deploy", "systemd", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var ds []directive
	section := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = line[1 : len(line)-1]
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || strings.HasSuffix(line, `\`) {
				t.Fatalf("%s: %q: not Key=Value on one line", name, line)
			}
			ds = append(ds, directive{section, k, v})
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return ds
}

// values are the values a unit gives key in section, in order.
func values(ds []directive, section, key string) []string {
	var vs []string
	for _, d := range ds {
		if d.section == section && d.key == key {
			vs = append(vs, d.value)
		}
	}
	return vs
}

// requireSystemdAnalyze finds systemd-analyze, skipping the test without it
// unless the run requires every tool (make test sets COVE_REQUIRE_…).
func requireSystemdAnalyze(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("systemd-analyze")
	if err == nil {
		return path
	}
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "COVE_REQUIRE_") {
			t.Fatalf("systemd-analyze is missing (Debian's package systemd; `make test-deps` installs it) and %s requires the tools of every test", kv)
		}
	}
	t.Skip("systemd-analyze is missing (Debian's package systemd)")
	return ""
}

// TestUnitsVerify has systemd check the units as it would load them, with
// the binary they name standing at a path that exists: an unknown
// directive, a value systemd refuses or a missing command fails it.
// Nothing is started: verify only loads the units.
func TestUnitsVerify(t *testing.T) {
	analyze := requireSystemdAnalyze(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var paths []string
	for _, name := range units {
		b, err := os.ReadFile(filepath.Join(repoRoot(t), "deploy", "systemd", name))
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		if !strings.Contains(text, "ExecStart="+installedBinary+" ") {
			t.Fatalf("%s: ExecStart does not run %s", name, installedBinary)
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(strings.ReplaceAll(text, installedBinary, exe)), 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	verify(t, analyze, paths)
}

// verify has systemd-analyze load the unit files at paths. It reports a
// bad directive as a warning and exits 0: any line naming one of the
// units fails the test. Lines about the host's own units are not the
// units' fault.
func verify(t *testing.T, analyze string, paths []string) {
	t.Helper()
	out, err := exec.Command(analyze, append([]string{"verify", "--man=no"}, paths...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		for _, name := range units {
			if strings.Contains(line, name) {
				t.Errorf("systemd-analyze verify: %s", line)
				break
			}
		}
	}
}

// TestUnitsDirectives checks what each unit must have and must not have,
// and that docs/fleet.md gives the reason for every directive.
func TestUnitsDirectives(t *testing.T) {
	// sandboxHost are the units that run sandboxes.
	sandboxHost := map[string]bool{"cove.service": true, "cove-node.service": true}
	// Directives that would reach the sandboxes: a mount namespace of the
	// unit's own (a restarted unit would not see its running sandboxes'
	// mounts, nor would the host), a seccomp filter, no_new_privs or
	// dropped capabilities (inherited by runc and every sandbox), an OOM
	// score or a umask (inherited by every sandbox's process and file).
	notOnSandboxHost := []string{
		"ProtectSystem", "ProtectHome", "PrivateTmp", "PrivateDevices", "PrivateMounts", "ReadOnlyPaths",
		"ReadWritePaths", "InaccessiblePaths", "TemporaryFileSystem", "ProtectKernelTunables",
		"ProtectKernelModules", "ProtectControlGroups", "ProtectHostname", "ProtectClock",
		"SystemCallFilter", "SystemCallArchitectures", "RestrictNamespaces", "LockPersonality",
		"MemoryDenyWriteExecute", "RestrictSUIDSGID", "NoNewPrivileges", "CapabilityBoundingSet",
		"DynamicUser", "User", "OOMScoreAdjust", "UMask", "PrivateNetwork", "RestrictAddressFamilies",
	}
	want := map[string]map[string]string{
		"cove.service":      {"Delegate": "yes", "KillMode": "process", "StateDirectory": "cove"},
		"cove-node.service": {"Delegate": "yes", "KillMode": "process", "StateDirectory": "cove", "Conflicts": "cove.service"},
		"cove-control.service": {
			"StateDirectory": "cove-control", "NoNewPrivileges": "yes",
			"CapabilityBoundingSet": "CAP_CHOWN CAP_DAC_OVERRIDE CAP_FOWNER CAP_FSETID", "ProtectSystem": "strict", "PrivateDevices": "yes",
			"RestrictNamespaces": "yes", "SystemCallErrorNumber": "EPERM", "LoadCredential": "secrets.key:/etc/cove/secrets.key",
		},
	}
	docs, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "fleet.md"))
	if err != nil {
		t.Fatal(err)
	}
	var rows []string
	for _, line := range strings.Split(string(docs), "\n") {
		if strings.HasPrefix(line, "| `") {
			rows = append(rows, line)
		}
	}
	// Every row says what a unit has: `Key=Value` | the units | why.
	for _, row := range rows {
		cells := strings.Split(row, "|")
		if len(cells) < 4 {
			t.Errorf("docs/fleet.md: %q: want | `Key=Value` | units | why |", row)
			continue
		}
		kv := strings.Trim(strings.TrimSpace(cells[1]), "`")
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			continue // another table of the page
		}
		for _, name := range strings.Split(cells[2], ",") {
			name = strings.TrimSpace(name)
			if !strings.HasSuffix(name, ".service") {
				continue
			}
			if !slices.Contains(values(readUnit(t, name), "Service", k), v) {
				t.Errorf("docs/fleet.md says %s has %s=%s; it has %s=%v", name, k, v, k, values(readUnit(t, name), "Service", k))
			}
		}
	}
	for _, name := range units {
		t.Run(name, func(t *testing.T) {
			ds := readUnit(t, name)
			for k, v := range want[name] {
				if vs := values(ds, "Service", k); len(vs) != 1 || vs[0] != v {
					if k == "Conflicts" {
						vs = values(ds, "Unit", k)
					}
					if len(vs) != 1 || vs[0] != v {
						t.Errorf("%s=%v, want %s=%s", k, vs, k, v)
					}
				}
			}
			if sandboxHost[name] {
				for _, k := range notOnSandboxHost {
					if vs := values(ds, "Service", k); len(vs) > 0 {
						t.Errorf("%s=%s: it would reach the sandboxes", k, vs[0])
					}
				}
			}
			for _, d := range ds {
				// The command line and its environment are the install
				// sections' matter, not the table's.
				if d.section != "Service" || d.key == "ExecStart" || d.key == "Environment" || d.key == "EnvironmentFile" {
					continue
				}
				found := false
				for _, row := range rows {
					if strings.Contains(row, "`"+d.key+"=") && strings.Contains(row, name) {
						found = true
						break
					}
				}
				if !found {
					t.Errorf("%s=%s: docs/fleet.md has no row for it naming %s", d.key, d.value, name)
				}
			}
		})
	}
}

// TestUnitsCommandLines expands each unit's ExecStart as systemd does,
// with the unit's Environment= defaults and an environment file an
// operator writes, and has cove parse the command line.
func TestUnitsCommandLines(t *testing.T) {
	tests := []struct {
		unit    string
		envFile map[string]string
		want    map[string]string // flags the command line must have
	}{
		// cove serve reads its config file and COVE_* variables itself
		// (internal/cli/cliconfig): the command line names only the file.
		{"cove.service", nil, map[string]string{"config": "/etc/cove/cove.toml"}},
		{"cove.service", map[string]string{"COVE_LISTEN": "0.0.0.0:7070", "COVE_ARGS": "--preview-domain preview.example.com --max-cpus 4"},
			map[string]string{"config": "/etc/cove/cove.toml", "preview-domain": "preview.example.com", "max-cpus": "4"}},
		{"cove-control.service", nil, map[string]string{"store": "sqlite:/var/lib/cove-control/cove.db", "data-dir": "/var/lib/cove-control", "node-listen": "127.0.0.1:7071", "secrets-key-file": "/run/credentials/cove-control.service/secrets.key"}},
		{"cove-control.service", map[string]string{
			"COVE_STORE":       "postgres://cove@db.internal.example:5432/cove?sslmode=verify-full",
			"PGPASSWORD":       "not-on-the-command-line",
			"COVE_LISTEN":      "0.0.0.0:7070",
			"COVE_NODE_LISTEN": "0.0.0.0:7071",
			"COVE_SAVES":       "s3://cove-saves/prod?endpoint=https://s3.internal.example:9000",
			"COVE_ARGS":        "--cpu-overcommit 4",
		}, map[string]string{"store": "postgres://cove@db.internal.example:5432/cove?sslmode=verify-full", "node-listen": "0.0.0.0:7071", "cpu-overcommit": "4"}},
		{"cove-node.service", map[string]string{
			"COVE_CONTROL":   "https://control-a.internal.example:7071,https://control-b.internal.example:7071",
			"COVE_LISTEN":    "0.0.0.0:7072",
			"COVE_ADVERTISE": "10.0.0.5:7072",
			"COVE_SAVES":     "s3://cove-saves/prod?endpoint=https://s3.internal.example:9000",
		}, map[string]string{"control": "https://control-a.internal.example:7071,https://control-b.internal.example:7071", "join-token-file": "/etc/cove/join-token", "advertise": "10.0.0.5:7072"}},
		// The least an operator writes: the control plane's address.
		{"cove-node.service", map[string]string{"COVE_CONTROL": "https://control.internal.example:7071"},
			map[string]string{"listen": "127.0.0.1:7072", "saves": "", "data-dir": "/var/lib/cove"}},
	}
	for _, tt := range tests {
		t.Run(tt.unit, func(t *testing.T) {
			ds := readUnit(t, tt.unit)
			// systemd's own: where LoadCredential= puts the files.
			env := map[string]string{"CREDENTIALS_DIRECTORY": "/run/credentials/" + tt.unit}
			for _, v := range values(ds, "Service", "Environment") {
				k, val, _ := strings.Cut(v, "=")
				env[k] = val
			}
			// An environment file overrides Environment=.
			for k, v := range tt.envFile {
				env[k] = v
			}
			exec := values(ds, "Service", "ExecStart")
			if len(exec) != 1 {
				t.Fatalf("ExecStart: %v", exec)
			}
			args := expandExec(exec[0], env)
			if args[0] != installedBinary {
				t.Fatalf("ExecStart runs %s, want %s", args[0], installedBinary)
			}
			for k, v := range tt.want {
				if got, ok := flagValue(args, k); !ok || got != v {
					t.Errorf("--%s %q (set: %v), want %q in %q", k, got, ok, v, args)
				}
			}
			if pw, ok := tt.envFile["PGPASSWORD"]; ok && strings.Contains(strings.Join(args, " "), pw) {
				t.Errorf("the database password is on the command line: %q", args)
			}
			checkArgs(t, tt.unit, args[1:])
		})
	}
}

// expandExec splits an ExecStart line as systemd does for the forms the
// units use: words split on white space; a word that is $NAME alone
// becomes the value's words (none when empty); ${NAME} in a word becomes
// the value whole, also when empty.
func expandExec(line string, env map[string]string) []string {
	var args []string
	for _, w := range strings.Fields(line) {
		if strings.HasPrefix(w, "$") && !strings.HasPrefix(w, "${") {
			args = append(args, strings.Fields(env[w[1:]])...)
			continue
		}
		args = append(args, os.Expand(w, func(k string) string { return env[k] }))
	}
	return args
}
