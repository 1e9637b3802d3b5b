package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
	cove "github.com/cove-dev/cove/sdk/go"
)

func TestCreateExecTerminate(t *testing.T) {
	s := e2etest.StartServer(t)
	ctx := t.Context()
	sb := e2etest.Create(t, s.Admin, api.CreateSandboxRequest{Name: "demo", Labels: map[string]string{"ticket": "42"}})
	if sb.Name != "demo" || sb.Workdir != "/workspace" || sb.StartedAt == nil {
		t.Errorf("sandbox = %+v", sb)
	}

	res := e2etest.Sh(t, s.Admin, "demo", "echo out; echo err >&2; pwd; id -u; hostname; exit 3")
	if got, want := res.Stdout, "out\n/workspace\n1000\ndemo\n"; got != want {
		t.Errorf("stdout = %q, want %q", got, want)
	}
	if res.Stderr != "err\n" || e2etest.ExitCode(res) != 3 || res.Command.State != api.CommandExited {
		t.Errorf("stderr %q exit %d state %s", res.Stderr, e2etest.ExitCode(res), res.Command.State)
	}

	// argv runs without a shell; env and cwd reach the process.
	out, err := s.Admin.ExecWait(ctx, sb.ID, api.CreateCommandRequest{
		Argv: []string{"sh", "-c", `echo "$FOO $0"; pwd`, "arg0"}, Env: map[string]string{"FOO": "bar"}, Cwd: "/tmp",
	})
	if err != nil || out.Stdout != "bar arg0\n/tmp\n" {
		t.Errorf("argv: %q, %v", out.Stdout, err)
	}
	if got := e2etest.MustOK(t, s.Admin, sb.ID, "id -u", e2etest.AsRoot); got != "0\n" {
		t.Errorf("root id = %q", got)
	}

	// Get by ID and by name; list with filters.
	for _, ref := range []string{sb.ID, "demo"} {
		got, err := s.Admin.GetSandbox(ctx, ref)
		if err != nil || got.ID != sb.ID {
			t.Errorf("get %s: %+v %v", ref, got.ID, err)
		}
	}
	for _, q := range []cove.SandboxQuery{
		{States: []api.SandboxState{api.StateRunning}},
		{Labels: map[string]string{"ticket": "42"}},
	} {
		page, err := s.Admin.ListSandboxes(ctx, q)
		if err != nil || len(page.Items) != 1 || page.Items[0].ID != sb.ID {
			t.Errorf("list %+v: %+v %v", q, page.Items, err)
		}
	}
	page, _ := s.Admin.ListSandboxes(ctx, cove.SandboxQuery{Labels: map[string]string{"ticket": "43"}})
	if len(page.Items) != 0 {
		t.Errorf("label filter ticket=43 matched %d", len(page.Items))
	}
	cmds, err := s.Admin.ListCommands(ctx, sb.ID, 0, "")
	if err != nil || len(cmds.Items) != 3 {
		t.Errorf("commands: %d %v", len(cmds.Items), err)
	}

	// A second sandbox may not take a live name.
	_, err = s.Admin.CreateSandbox(ctx, api.CreateSandboxRequest{Name: "demo"}, false)
	if api.ErrorCode(err) != api.CodeConflict {
		t.Errorf("duplicate name: %v, want conflict", err)
	}

	if _, err := s.Admin.TerminateSandbox(ctx, "demo"); err != nil {
		t.Fatal(err)
	}
	got, err := s.Admin.WaitSandbox(ctx, sb.ID, api.StateTerminated, time.Minute)
	if err != nil || got.State != api.StateTerminated {
		t.Fatalf("after terminate: %s %v", got.State, err)
	}
	_, err = s.Admin.Exec(ctx, sb.ID, api.CreateCommandRequest{Command: "true"})
	if api.ErrorCode(err) != api.CodeConflict {
		t.Errorf("exec in terminated sandbox: %v, want conflict", err)
	}
	// The name is free again.
	e2etest.Create(t, s.Admin, api.CreateSandboxRequest{Name: "demo"})
}

// TestTerminateLeavesNothing looks for every kind of thing a sandbox has on
// the host after it is terminated.
func TestTerminateLeavesNothing(t *testing.T) {
	s := e2etest.StartServer(t)
	ctx := t.Context()
	sb := e2etest.Create(t, s.Admin, api.CreateSandboxRequest{})
	// Something running, with children, when the terminate comes.
	if _, err := s.Admin.Exec(ctx, sb.ID, api.CreateCommandRequest{Command: "sleep 1000 & sleep 1000 & wait"}); err != nil {
		t.Fatal(err)
	}
	before := leftovers(t, s, sb.ID)
	if len(before) == 0 {
		t.Fatal("found no trace of a running sandbox: the leak check would prove nothing")
	}
	if _, err := s.Admin.TerminateSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Admin.WaitSandbox(ctx, sb.ID, api.StateTerminated, time.Minute); err != nil || got.State != api.StateTerminated {
		t.Fatalf("terminate: %s %v", got.State, err)
	}
	if left := settledLeftovers(t, s, sb.ID); len(left) > 0 {
		t.Errorf("after terminate these remain:\n%s", strings.Join(left, "\n"))
	}
}

// settledLeftovers is leftovers once the host's init had a moment to reap
// the sandbox's exited init process (a zombie holds nothing but its entry).
func settledLeftovers(t testing.TB, s *e2etest.Server, id string, allowed ...string) []string {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		var left []string
	next:
		for _, l := range leftovers(t, s, id) {
			for _, a := range allowed {
				if strings.Contains(l, a) {
					continue next
				}
			}
			left = append(left, l)
		}
		onlyZombies := true
		for _, l := range left {
			if !strings.HasPrefix(l, "process ") || !strings.Contains(l, ") Z ") {
				onlyZombies = false
			}
		}
		if len(left) == 0 || !onlyZombies || time.Now().After(deadline) {
			return left
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// leftovers lists what of a sandbox exists on the host: processes in its
// cgroups, mounts, cgroup dirs, the runc container, the state dir and its
// recorded output.
func leftovers(t testing.TB, s *e2etest.Server, id string) []string {
	t.Helper()
	var found []string
	// Processes whose cgroup names the sandbox.
	procs, _ := filepath.Glob("/proc/[0-9]*/cgroup")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err == nil && strings.Contains(string(b), id) {
			dir := filepath.Dir(p)
			cmdline, _ := os.ReadFile(filepath.Join(dir, "cmdline"))
			status, _ := os.ReadFile(filepath.Join(dir, "stat"))
			found = append(found, fmt.Sprintf("process %s %q (%s)", filepath.Base(dir),
				strings.ReplaceAll(string(cmdline), "\x00", " "), strings.TrimSpace(string(status))))
		}
	}
	if b, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, id) {
				found = append(found, "mount "+line)
			}
		}
	}
	dirs, _ := filepath.Glob("/sys/fs/cgroup/*" + s.Cgroup + "/" + id)
	for _, d := range dirs {
		found = append(found, "cgroup "+d)
	}
	if out, err := runOut("runc", "--root", filepath.Join(s.DataDir, "runc"), "list", "-q"); err == nil && strings.Contains(out, id) {
		found = append(found, "runc container "+id)
	}
	for _, p := range []string{filepath.Join(s.DataDir, "sandboxes", id), filepath.Join(s.DataDir, "output", id)} {
		if _, err := os.Stat(p); err == nil {
			found = append(found, "path "+p)
		}
	}
	if out, err := runOut("losetup", "-j", filepath.Join(s.DataDir, "sandboxes", id, "disk.img")); err == nil && strings.TrimSpace(out) != "" {
		found = append(found, "loop device "+strings.TrimSpace(out))
	}
	return found
}

// TestTeamsSeeOnlyTheirOwn checks every sandbox and command endpoint with a
// key of a team that does not own the resource.
func TestTeamsSeeOnlyTheirOwn(t *testing.T) {
	s := e2etest.StartServer(t)
	ctx := t.Context()
	alice, bob := s.NewTeam("alice"), s.NewTeam("bob")
	sb := e2etest.Create(t, alice, api.CreateSandboxRequest{Name: "mine"})
	cmd, err := alice.Exec(ctx, sb.ID, api.CreateCommandRequest{Command: "cat", Stdin: true})
	if err != nil {
		t.Fatal(err)
	}
	bobKey := s.Keys()[2]
	cmdPath := "/v1/sandboxes/" + sb.ID + "/commands/" + cmd.ID
	calls := []struct{ method, path, body string }{
		{"GET", "/v1/sandboxes/" + sb.ID, ""},
		{"GET", "/v1/sandboxes/mine", ""},
		{"GET", "/v1/sandboxes/" + sb.ID + "?wait=running&timeout_s=1", ""},
		{"DELETE", "/v1/sandboxes/" + sb.ID, ""},
		{"DELETE", "/v1/sandboxes/mine", ""},
		{"POST", "/v1/sandboxes/" + sb.ID + "/commands", `{"command":"true"}`},
		{"POST", "/v1/sandboxes/mine/commands?wait=true", `{"command":"true"}`},
		{"GET", "/v1/sandboxes/" + sb.ID + "/commands", ""},
		{"GET", cmdPath, ""},
		{"GET", cmdPath + "/output", ""},
		{"GET", cmdPath + "/stdout", ""},
		{"GET", cmdPath + "/stderr", ""},
		{"POST", cmdPath + "/stdin", `x`},
		{"POST", cmdPath + "/signal", `{"signal":"KILL"}`},
		{"POST", "/v1/teams/" + "team_x" + "/keys", ""},
	}
	for _, c := range calls {
		status, er, body := e2etest.RawRequest(t, c.method, s.URL+c.path, bobKey, c.body)
		if status != http.StatusNotFound || er.Error == nil || er.Error.Code != api.CodeNotFound {
			t.Errorf("bob %s %s: %d %s, want 404 not_found", c.method, c.path, status, body)
		}
	}
	page, err := bob.ListSandboxes(ctx, cove.SandboxQuery{})
	if err != nil || len(page.Items) != 0 {
		t.Errorf("bob lists %d sandboxes (%v), want 0", len(page.Items), err)
	}
	bobs := e2etest.Create(t, bob, api.CreateSandboxRequest{Name: "mine"}) // names are per team
	page, _ = alice.ListSandboxes(ctx, cove.SandboxQuery{})
	if len(page.Items) != 1 || page.Items[0].ID != sb.ID {
		t.Errorf("alice lists %+v, want only her own", page.Items)
	}
	if got, err := bob.GetSandbox(ctx, "mine"); err != nil || got.ID != bobs.ID {
		t.Errorf("bob's mine = %v %v", got.ID, err)
	}
	// Nothing bob did touched alice's sandbox or command.
	if got, _ := alice.GetSandbox(ctx, sb.ID); got.State != api.StateRunning {
		t.Errorf("alice's sandbox is %s after bob's calls", got.State)
	}
	if got, _ := alice.GetCommand(ctx, sb.ID, cmd.ID); got.State != api.CommandRunning {
		t.Errorf("alice's command is %s after bob's calls", got.State)
	}
	// Only the admin team manages teams.
	if _, err := bob.CreateTeam(ctx, "carol"); api.ErrorCode(err) != api.CodePermissionDenied {
		t.Errorf("bob creates a team: %v, want permission_denied", err)
	}
}

// TestBadInput checks that malformed requests get the API's error format
// with the right status and create nothing.
func TestBadInput(t *testing.T) {
	s := e2etest.StartServer(t)
	key := s.AdminKey
	tests := []struct {
		name, method, path, key, body string
		status                        int
		code                          api.Code
	}{
		{"missing auth", "POST", "/v1/sandboxes", "", `{}`, 401, api.CodeUnauthenticated},
		{"wrong key", "POST", "/v1/sandboxes", "cove_nope", `{}`, 401, api.CodeUnauthenticated},
		{"not a key", "GET", "/v1/sandboxes", "garbage", ``, 401, api.CodeUnauthenticated},
		{"unknown field", "POST", "/v1/sandboxes", key, `{"nmae":"x"}`, 400, api.CodeInvalidArgument},
		{"broken json", "POST", "/v1/sandboxes", key, `{"name":`, 400, api.CodeInvalidArgument},
		{"not json", "POST", "/v1/sandboxes", key, `name=x`, 400, api.CodeInvalidArgument},
		{"trailing data", "POST", "/v1/sandboxes", key, `{} {}`, 400, api.CodeInvalidArgument},
		{"wrong type", "POST", "/v1/sandboxes", key, `{"name":5}`, 400, api.CodeInvalidArgument},
		{"negative cpus", "POST", "/v1/sandboxes", key, `{"resources":{"cpus":-1}}`, 400, api.CodeInvalidArgument},
		{"zero memory", "POST", "/v1/sandboxes", key, `{"resources":{"memory_mib":0}}`, 400, api.CodeInvalidArgument},
		{"huge memory", "POST", "/v1/sandboxes", key, `{"resources":{"memory_mib":99999999}}`, 400, api.CodeInvalidArgument},
		{"huge disk", "POST", "/v1/sandboxes", key, `{"resources":{"disk_mib":1e12}}`, 400, api.CodeInvalidArgument},
		{"huge cpus", "POST", "/v1/sandboxes", key, `{"resources":{"cpus":1000}}`, 400, api.CodeInvalidArgument},
		{"upper-case name", "POST", "/v1/sandboxes", key, `{"name":"Demo"}`, 400, api.CodeInvalidArgument},
		{"name with slash", "POST", "/v1/sandboxes", key, `{"name":"a/b"}`, 400, api.CodeInvalidArgument},
		{"long name", "POST", "/v1/sandboxes", key, `{"name":"` + strings.Repeat("a", 64) + `"}`, 400, api.CodeInvalidArgument},
		{"unknown template", "POST", "/v1/sandboxes", key, `{"template":"nope"}`, 400, api.CodeInvalidArgument},
		{"relative workdir", "POST", "/v1/sandboxes", key, `{"workdir":"work"}`, 400, api.CodeInvalidArgument},
		{"bad env name", "POST", "/v1/sandboxes", key, `{"env":{"1A":"x"}}`, 400, api.CodeInvalidArgument},
		{"bad on_idle", "POST", "/v1/sandboxes", key, `{"on_idle":"nap"}`, 400, api.CodeInvalidArgument},
		{"too large body", "POST", "/v1/sandboxes", key, `{"name":"` + strings.Repeat("a", 2<<20) + `"}`, 413, api.CodePayloadTooLarge},
		{"bad wait", "POST", "/v1/sandboxes?wait=soon", key, `{}`, 400, api.CodeInvalidArgument},
		{"bad state filter", "GET", "/v1/sandboxes?state=dancing", key, ``, 400, api.CodeInvalidArgument},
		{"bad limit", "GET", "/v1/sandboxes?limit=-1", key, ``, 400, api.CodeInvalidArgument},
		{"unknown sandbox", "GET", "/v1/sandboxes/sbx_00000000000000000000000000", key, ``, 404, api.CodeNotFound},
		{"unknown name", "GET", "/v1/sandboxes/nobody", key, ``, 404, api.CodeNotFound},
		{"unknown endpoint", "GET", "/v1/nothing", key, ``, 404, api.CodeNotFound},
		{"bad team name", "POST", "/v1/teams", key, `{"name":"A B"}`, 400, api.CodeInvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, er, body := e2etest.RawRequest(t, tt.method, s.URL+tt.path, tt.key, tt.body)
			if status != tt.status || er.Error == nil || er.Error.Code != tt.code || er.Error.Message == "" {
				t.Errorf("got %d %s, want %d %s", status, body, tt.status, tt.code)
			}
		})
	}
	page, err := s.Admin.ListSandboxes(t.Context(), cove.SandboxQuery{})
	if err != nil || len(page.Items) != 0 {
		t.Errorf("bad requests created %d sandboxes (%v)", len(page.Items), err)
	}

	// Bad commands against a real sandbox.
	sb := e2etest.Create(t, s.Admin, api.CreateSandboxRequest{})
	cmdTests := []struct {
		name, body string
		code       api.Code
	}{
		{"neither", `{}`, api.CodeInvalidArgument},
		{"both", `{"command":"true","argv":["true"]}`, api.CodeInvalidArgument},
		{"empty argv0", `{"argv":[""]}`, api.CodeInvalidArgument},
		{"relative cwd", `{"command":"true","cwd":"tmp"}`, api.CodeInvalidArgument},
		{"negative timeout", `{"command":"true","timeout_s":-1}`, api.CodeInvalidArgument},
		{"unknown user", `{"command":"true","user":"nobody"}`, api.CodeInvalidArgument},
		{"missing program", `{"argv":["/no/such/program"]}`, api.CodeInvalidArgument},
		{"missing cwd", `{"command":"true","cwd":"/no/such/dir"}`, api.CodeInvalidArgument},
		{"unknown field", `{"command":"true","shell":"zsh"}`, api.CodeInvalidArgument},
	}
	for _, tt := range cmdTests {
		t.Run("command/"+tt.name, func(t *testing.T) {
			status, er, body := e2etest.RawRequest(t, "POST", s.URL+"/v1/sandboxes/"+sb.ID+"/commands", key, tt.body)
			if status != 400 || er.Error == nil || er.Error.Code != tt.code {
				t.Errorf("got %d %s, want 400 %s", status, body, tt.code)
			}
		})
	}
	cmds, err := s.Admin.ListCommands(t.Context(), sb.ID, 0, "")
	if err != nil || len(cmds.Items) != 0 {
		t.Errorf("bad commands left %d command records (%v)", len(cmds.Items), err)
	}
}

func TestCreateFailureIsReported(t *testing.T) {
	s := e2etest.StartServer(t)
	// A workdir under a file cannot be made: the start fails with a reason.
	sb, err := s.Admin.CreateSandbox(t.Context(), api.CreateSandboxRequest{Workdir: "/bin/busybox/x"}, true)
	if err != nil {
		t.Fatal(err)
	}
	if sb.State != api.StateFailed || sb.StateReason == "" {
		t.Fatalf("state %s reason %q, want failed with a reason", sb.State, sb.StateReason)
	}
	if left := settledLeftovers(t, s, sb.ID); len(left) > 0 {
		t.Errorf("a failed start left:\n%s", strings.Join(left, "\n"))
	}
}

func runOut(name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).Output()
	return string(out), err
}
