package e2bcompat

import (
	"context"
	"encoding/json"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
	"github.com/cove-dev/cove/internal/node/image"
	cove "github.com/cove-dev/cove/sdk/go"
)

// createE2B creates a sandbox of E2B's base template through the E2B
// REST API, as the SDKs do, and returns its ID.
func createE2B(t *testing.T, s *e2etest.Server, key string) string {
	t.Helper()
	req, err := http.NewRequest("POST", "http://"+s.Listeners()["e2b-api"]+"/sandboxes",
		strings.NewReader(`{"templateID":"base","timeout":900}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-API-Key", key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var sb struct {
		SandboxID string `json:"sandboxID"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&sb); err != nil || resp.StatusCode != http.StatusCreated || sb.SandboxID == "" {
		t.Fatalf("E2B create: %d %+v %v", resp.StatusCode, sb, err)
	}
	return sb.SandboxID
}

// canSudo runs sudo as user in a sandbox and reports whether it made
// root; it also checks the two settings sudo needs and that they agree.
func canSudo(t *testing.T, c *cove.Client, id string) bool {
	t.Helper()
	res := e2etest.Sh(t, c, id, "id -un; sudo -n id -u")
	ok := e2etest.ExitCode(res) == 0 && res.Stdout == "user\n0\n"
	if !ok && (e2etest.ExitCode(res) == 0 || !strings.HasPrefix(res.Stdout, "user\n")) {
		t.Fatalf("%s: sudo as user answered %d %q %q; want root or a failure", id, e2etest.ExitCode(res), res.Stdout, res.Stderr)
	}
	nnp := strings.TrimSpace(e2etest.MustOK(t, c, id, "grep NoNewPrivs /proc/self/status | tr -d '\\t '"))
	// The root filesystem's mount options (mountinfo's sixth field).
	opts := strings.TrimSpace(e2etest.MustOK(t, c, id, `awk '$5 == "/" {print $6}' /proc/self/mountinfo`))
	nosuid := strings.Contains(","+opts+",", ",nosuid,")
	if want := map[bool]string{true: "NoNewPrivs:0", false: "NoNewPrivs:1"}[ok]; nnp != want || nosuid == ok {
		t.Errorf("%s: sudo works=%v but %s, root mounted %q", id, ok, nnp, opts)
	}
	return ok
}

// TestSudoOnlyInE2BSandboxes: a sandbox made through the E2B listener runs
// sudo as its user, and root reached so is still the sandbox's root (an
// unprivileged host uid, the same capabilities, under seccomp, unable to
// touch the host's files or load a module). A sandbox of the same
// template made through cove's API cannot gain privileges, and its team
// cannot turn that on: not through create fields, PATCH or labels. Both
// stay so through sleep and wake, and a restart of the server.
func TestSudoOnlyInE2BSandboxes(t *testing.T) {
	s := e2bServer(t)
	c, key := e2bKey(t, s, "e2b-sudo")
	ctx := context.Background()

	e2bID := createE2B(t, s, key)
	// Through cove's API, from the warm pool, labelled as E2B labels
	// its own.
	own := e2etest.Create(t, c, api.CreateSandboxRequest{Template: "managed", Labels: map[string]string{"e2b/template": "base"}})
	if !canSudo(t, c, e2bID) {
		t.Fatalf("sudo fails in the E2B sandbox %s", e2bID)
	}
	if canSudo(t, c, own.ID) {
		t.Fatalf("sudo works in %s, made through cove's API", own.ID)
	}

	// Root through sudo is the sandbox's root: mapped to its own
	// unprivileged host range, with the capabilities root has there
	// anyway, under the same seccomp filter.
	uidMap := strings.Fields(e2etest.MustOK(t, c, e2bID, "sudo -n cat /proc/self/uid_map"))
	if len(uidMap) != 3 || uidMap[0] != "0" || uidMap[1] == "0" || uidMap[2] != "65536" {
		t.Errorf("uid_map of root through sudo: %q; want 0 mapped to an unprivileged host range of 65536", uidMap)
	}
	status := func(user string) string {
		return e2etest.MustOK(t, c, e2bID, user+"grep -E '^(Uid|CapEff|CapBnd|Seccomp):' /proc/self/status")
	}
	viaSudo, asRoot := status("sudo -n "), e2etest.MustOK(t, c, e2bID, "grep -E '^(Uid|CapEff|CapBnd|Seccomp):' /proc/self/status", e2etest.AsRoot)
	if viaSudo != asRoot || !strings.Contains(viaSudo, "Seccomp:\t2") {
		t.Errorf("root through sudo:\n%s\nroot through the API:\n%s\nwant the same, Seccomp 2", viaSudo, asRoot)
	}
	for _, hostile := range []struct{ what, cmd string }{
		{"write the host's agent binary", "sudo -n sh -c 'echo x >> /.cove/cove-agent'"},
		{"remount the agent's bind writable", "sudo -n mount -o remount,bind,rw /.cove/cove-agent"},
		{"chown the host's file", "sudo -n chown 0 /.cove/cove-agent"},
		{"load a kernel module", "sudo -n python3 -c 'import ctypes,sys; l=ctypes.CDLL(None, use_errno=True); sys.exit(0 if l.syscall(" + initModule() + ", None, 0, b\"\") == 0 else 1)'"},
		{"mount a filesystem", "sudo -n mount -t tmpfs none /mnt"},
	} {
		if r := e2etest.Sh(t, c, e2bID, hostile.cmd); e2etest.ExitCode(r) == 0 {
			t.Errorf("root through sudo could %s: %q %q", hostile.what, r.Stdout, r.Stderr)
		}
	}
	// The agent's bind stays the host's: owned by no one the sandbox maps.
	if got := e2etest.MustOK(t, c, e2bID, "sudo -n stat -c %u /.cove/cove-agent"); got != "65534\n" {
		t.Errorf("the agent binary is owned by %q in the sandbox; want 65534, the overflow uid", got)
	}

	// A set-uid program root plants in the E2B sandbox's root (mounted
	// without nosuid) is owned on the host by the sandbox's own mapped
	// root, never host root, and no other host user reaches it.
	if got := e2etest.MustOK(t, c, e2bID, "sudo -n cp /usr/bin/id /usr/local/bin/planted && sudo -n chmod 4755 /usr/local/bin/planted && /usr/local/bin/planted -u"); got != "0\n" {
		t.Errorf("the planted set-uid program run as user in the sandbox: %q; want 0", got)
	}
	planted := filepath.Join(s.DataDir, "sandboxes", e2bID, "rootfs", "usr/local/bin/planted")
	st, err := os.Stat(planted)
	if err != nil {
		t.Fatal(err)
	}
	if sys := st.Sys().(*syscall.Stat_t); st.Mode()&fs.ModeSetuid == 0 || strconv.Itoa(int(sys.Uid)) != uidMap[1] {
		t.Errorf("the planted program on the host: %v owned by %d; want set-uid, owned by the sandbox's root %s", st.Mode(), sys.Uid, uidMap[1])
	}
	asNobody := exec.Command(planted, "-u")
	asNobody.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	if out, err := asNobody.CombinedOutput(); err == nil {
		t.Errorf("host user nobody ran the planted program: %q", out)
	}

	// The team's key cannot ask for it through cove's API.
	for _, body := range []string{`{"set_id":true}`, `{"SetID":true}`, `{"setid":true}`} {
		if code, _, raw := e2etest.RawRequest(t, "PATCH", s.URL+"/v1/sandboxes/"+own.ID, key, body); code != http.StatusBadRequest {
			t.Errorf("PATCH %s answered %d %s; want 400", body, code, raw)
		}
		create := `{"template":"managed",` + strings.TrimPrefix(body, "{")
		if code, _, raw := e2etest.RawRequest(t, "POST", s.URL+"/v1/sandboxes", key, create); code != http.StatusBadRequest {
			t.Errorf("POST /v1/sandboxes %s answered %d %s; want 400", create, code, raw)
		}
	}
	if _, err := c.UpdateSandbox(ctx, own.ID, api.UpdateSandboxRequest{Labels: map[string]string{"e2b/template": "base", "set_id": "true"}}); err != nil {
		t.Fatal(err)
	}

	check := func(when string) { checkSudo(t, c, when, e2bID, own.ID) }
	sleepWake(t, c, e2bID, own.ID)
	check("after sleep and wake")
	s.Stop(syscall.SIGTERM)
	s.Start()
	check("after a restart")
	sleepWake(t, c, e2bID, own.ID)
	check("after a restart, sleep and wake")
}

// checkSudo checks that sudo works in the E2B sandbox e2bID and not in
// own, made through cove's API.
func checkSudo(t *testing.T, c *cove.Client, when, e2bID, own string) {
	t.Helper()
	if !canSudo(t, c, e2bID) {
		t.Errorf("%s: sudo fails in the E2B sandbox", when)
	}
	if canSudo(t, c, own) {
		t.Errorf("%s: sudo works in the sandbox made through cove's API", when)
	}
}

// sleepWake puts sandboxes to sleep and wakes them.
func sleepWake(t *testing.T, c *cove.Client, ids ...string) {
	t.Helper()
	ctx := context.Background()
	for _, id := range ids {
		if _, err := c.SleepSandbox(ctx, id); err != nil {
			t.Fatal(err)
		}
		if sb, err := c.WaitSandbox(ctx, id, api.StateAsleep, 2*time.Minute); err != nil || sb.State != api.StateAsleep {
			t.Fatalf("sleep %s: %s %v", id, sb.State, err)
		}
		if _, err := c.WakeSandbox(ctx, id); err != nil {
			t.Fatal(err)
		}
		if sb, err := c.WaitSandbox(ctx, id, api.StateRunning, 2*time.Minute); err != nil || sb.State != api.StateRunning {
			t.Fatalf("wake %s: %s %v", id, sb.State, err)
		}
	}
}

// TestSudoInFleet: in a fleet (cove control with the E2B listeners, cove
// node running the sandboxes) the node is told which sandboxes run
// set-uid programs: sudo works in the E2B sandbox and not in cove's own,
// through a restart of the node, a sleep and wake (from the save store),
// and a restart of the control plane.
func TestSudoInFleet(t *testing.T) {
	if e2etest.ManagedDir() == "" {
		t.Skip("COVE_TEST_IMAGES is not set: `make test` sets it to build and cache the managed image")
	}
	e2etest.RequireRoot(t)
	// Nodes do not build the managed image; one of this recipe is made
	// first, as cove serve would.
	if _, err := image.EnsureManaged(t.Context(), e2etest.ManagedDir(), nil, nil); err != nil {
		t.Fatal(err)
	}
	f := e2etest.StartFleet(t, e2etest.FleetManaged, e2etest.FleetNodes(1), e2etest.FleetControlArgs(
		"--e2b-api-listen", "127.0.0.1:0", "--e2b-sandbox-listen", "127.0.0.1:0"))
	c, key := e2bKey(t, f.Control, "e2b-fleet")
	e2bID := createE2B(t, f.Control, key)
	own := e2etest.Create(t, c, api.CreateSandboxRequest{})
	checkSudo(t, c, "in a fleet", e2bID, own.ID)
	n := f.Nodes[0]
	before := reattached(f.Control, e2bID, own.ID)
	n.Stop(syscall.SIGTERM)
	n.Start()
	f.WaitNode(n.Name, "ready")
	// The control plane takes a sandbox up again once it has reattached it.
	deadline := time.Now().Add(2 * time.Minute)
	for reattached(f.Control, e2bID, own.ID) < before+2 {
		if time.Now().After(deadline) {
			t.Fatal("the sandboxes were not reattached after the node's restart")
		}
		time.Sleep(100 * time.Millisecond)
	}
	checkSudo(t, c, "after a restart of the node", e2bID, own.ID)
	sleepWake(t, c, e2bID, own.ID)
	checkSudo(t, c, "after sleep and wake", e2bID, own.ID)
	f.Control.Stop(syscall.SIGTERM)
	f.Control.Start()
	checkSudo(t, c, "after a restart of the control plane", e2bID, own.ID)
	sleepWake(t, c, e2bID, own.ID)
	checkSudo(t, c, "after that, sleep and wake", e2bID, own.ID)
}

// initModule is init_module's system call number.
func initModule() string {
	if runtime.GOARCH == "arm64" {
		return strconv.Itoa(105)
	}
	return strconv.Itoa(175) // amd64
}

// reattached counts the control plane's reports of the sandboxes
// reattached on their node.
func reattached(s *e2etest.Server, ids ...string) int {
	n, tail := 0, s.Tail(8<<20)
	for _, id := range ids {
		n += strings.Count(tail, `"msg":"sandbox reattached on its node","sandbox":"`+id+`"`)
	}
	return n
}
