// Package e2e runs `cove serve` as a real process over real runc, overlayfs
// and namespaces, and checks it from outside through the Go SDK and plain
// HTTP, as a user would. The tests need root; they skip otherwise.
package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/node/image"
	cove "github.com/cove-dev/cove/sdk/go"
)

var (
	binDir     string // holds cove and cove-agent
	imagesDir  string // holds the busybox test image
	managedDir string // holds the managed image, when COVE_TEST_IMAGES is set
	runID      string // unique to this run: names cgroups and dirs
	skipReason string
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	flag.Parse()
	switch {
	case testing.Short():
		skipReason = "e2e tests start real servers; -short skips them"
		return m.Run()
	case os.Geteuid() != 0:
		skipReason = "e2e tests need root (real runc, overlayfs, namespaces)"
		return m.Run()
	}
	b := make([]byte, 4)
	rand.Read(b)
	runID = hex.EncodeToString(b)
	runOctet = int(b[0]) % 100
	base, err := os.MkdirTemp("/var/tmp", "cove-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(base)
	// Sandboxes' mapped root must traverse the data dirs.
	os.Chmod(base, 0o711)

	binDir = os.Getenv("COVE_BIN")
	if binDir == "" {
		binDir = filepath.Join(base, "bin")
		for _, target := range []string{"cove", "cove-agent"} {
			cmd := exec.Command("go", "build", "-o", filepath.Join(binDir, target), "github.com/cove-dev/cove/cmd/"+target)
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
			if out, err := cmd.CombinedOutput(); err != nil {
				fmt.Fprintf(os.Stderr, "build %s: %v\n%s", target, err, out)
				return 1
			}
		}
	}
	imagesDir = filepath.Join(base, "images")
	if err := os.MkdirAll(imagesDir, 0o711); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if _, err := image.BuildBusybox(context.Background(), imagesDir, "busybox", image.IDMap{}); err != nil {
		fmt.Fprintln(os.Stderr, "build busybox image:", err)
		return 1
	}
	managedDir = os.Getenv("COVE_TEST_IMAGES")
	return m.Run()
}

func requireRoot(t testing.TB) {
	t.Helper()
	if skipReason != "" {
		t.Skip(skipReason)
	}
}

// server is one `cove serve` process and what it needs to be restarted.
type server struct {
	t         testing.TB
	args      []string
	dataDir   string
	home      string
	cgroup    string
	url       string
	adminKey  string
	admin     *cove.Client
	mu        sync.Mutex
	cmd       *exec.Cmd
	logs      *bytes.Buffer
	waitDone  chan struct{}
	extraArgs []string
	teamKeys  []string
	managed   bool
	table     string // nftables table of this server's fence
	subnet    string // its sandboxes' link subnet
	// listeners are what the running server bound, from its ready file.
	listeners map[string]string
}

// serverCount numbers the servers of this run; runOctet spreads runs over
// subnets.
var serverCount, runOctet int

type serverOpt func(*server)

// withManaged serves the managed image as the default template.
func withManaged(s *server) { s.managed = true }

func withArgs(args ...string) serverOpt {
	return func(s *server) { s.extraArgs = append(s.extraArgs, args...) }
}

// startServer runs `cove serve` with its own data dir, cgroup parent and
// nftables table, every listener on port 0 (the ports it bound come from
// its ready file), and registers cleanup that terminates every sandbox.
func startServer(t testing.TB, opts ...serverOpt) *server {
	t.Helper()
	requireRoot(t)
	dir, err := os.MkdirTemp("/var/tmp", "cove-e2e-srv-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o711)
	s := &server{
		t: t, dataDir: filepath.Join(dir, "data"), home: filepath.Join(dir, "home"),
		cgroup: "/cove-test-" + runID + "-" + filepath.Base(dir)[len("cove-e2e-srv-"):],
	}
	for _, o := range opts {
		o(s)
	}
	serverCount++
	s.table = fmt.Sprintf("covet%s%d", runID, serverCount)
	s.subnet = fmt.Sprintf("10.%d.%d.0/24", 100+runOctet, serverCount%250)
	s.args = []string{"serve", "--listen", "127.0.0.1:0", "--data-dir", s.dataDir,
		"--agent", filepath.Join(binDir, "cove-agent"), "--cgroup-parent", s.cgroup, "--log-level", "debug",
		"--nft-table", s.table, "--subnet", s.subnet, "--dns-upstream", "none",
		"--gateway-port", "0", "--dns-port", "0"}
	if s.managed {
		s.args = append(s.args, "--images-dir", managedDir, "--default-template", "managed", "--build-managed=true")
	} else {
		s.args = append(s.args, "--images-dir", imagesDir, "--build-managed=false", "--default-template", "busybox")
	}
	s.args = append(s.args, s.extraArgs...)
	s.start()
	b, err := os.ReadFile(filepath.Join(s.dataDir, "admin-api-key"))
	if err != nil {
		t.Fatalf("admin key: %v", err)
	}
	s.adminKey = strings.TrimSpace(string(b))
	s.admin = cove.New(s.url, s.adminKey)
	t.Cleanup(func() {
		s.terminateAll()
		s.stop(syscall.SIGTERM)
		removeCgroupParent(t, s.cgroup)
		exec.Command("nft", "delete", "table", "inet", s.table).Run()
		if t.Failed() {
			t.Logf("server log:\n%s", s.tail(8000))
		}
		os.RemoveAll(dir)
	})
	return s
}

// readyFile is where `cove serve` reports what it bound (the default,
// <data-dir>/ready.json).
func (s *server) readyFile() string { return filepath.Join(s.dataDir, "ready.json") }

// start runs the server and waits for its ready file. The first start
// learns the API address; a restart keeps it, as a real server's would
// (clients hold it), while the gateway and resolver take new free ports.
func (s *server) start() {
	s.t.Helper()
	// A file left by a killed server must not pass for this one's.
	if err := os.Remove(s.readyFile()); err != nil && !os.IsNotExist(err) {
		s.t.Fatal(err)
	}
	s.mu.Lock()
	cmd := exec.Command(filepath.Join(binDir, "cove"), s.args...)
	cmd.Env = append(os.Environ(), "HOME="+s.home)
	if s.logs == nil {
		s.logs = &bytes.Buffer{}
	}
	cmd.Stdout = lockedWriter{&s.mu, s.logs}
	cmd.Stderr = lockedWriter{&s.mu, s.logs}
	if err := cmd.Start(); err != nil {
		s.mu.Unlock()
		s.t.Fatal(err)
	}
	s.cmd = cmd
	done := make(chan struct{})
	s.waitDone = done
	s.mu.Unlock()
	go func() { cmd.Wait(); close(done) }() // owned: stop waits for done

	deadline := time.Now().Add(10 * time.Minute) // a first managed build takes minutes
	for time.Now().Before(deadline) {
		select {
		case <-done:
			s.t.Fatalf("cove serve exited at start:\n%s", s.tail(4000))
		default:
		}
		b, err := os.ReadFile(s.readyFile())
		if err == nil {
			s.ready(b)
			return
		}
		if !os.IsNotExist(err) {
			s.t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.t.Fatalf("cove serve wrote no ready file:\n%s", s.tail(4000))
}

// ready takes in the ready file of a server that serves.
func (s *server) ready(b []byte) {
	s.t.Helper()
	var r struct {
		PID       int               `json:"pid"`
		Listeners map[string]string `json:"listeners"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		s.t.Fatalf("ready file %q: %v", b, err)
	}
	api := r.Listeners["api"]
	if r.PID != s.pid() || api == "" {
		s.t.Fatalf("ready file %s: want the pid %d and an api address", b, s.pid())
	}
	if s.url == "" {
		s.url = "http://" + api
		for i, a := range s.args[:len(s.args)-1] {
			if a == "--listen" {
				s.args[i+1] = api
			}
		}
	} else if s.url != "http://"+api {
		s.t.Fatalf("restarted on %s, want %s", api, s.url)
	}
	s.mu.Lock()
	s.listeners = r.Listeners
	s.mu.Unlock()
}

// stop ends the server with sig and waits for it.
func (s *server) stop(sig syscall.Signal) {
	s.mu.Lock()
	cmd, done := s.cmd, s.waitDone
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(sig)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		<-done
	}
	s.mu.Lock()
	s.cmd = nil
	s.mu.Unlock()
}

func (s *server) tail(n int) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.logs.Bytes()
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// terminateAll terminates every live sandbox of every team and waits.
func (s *server) terminateAll() {
	s.mu.Lock()
	running := s.cmd != nil
	s.mu.Unlock()
	if !running {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, key := range s.keys() {
		c := cove.New(s.url, key)
		page, err := c.ListSandboxes(ctx, cove.SandboxQuery{Limit: 1000})
		if err != nil {
			continue
		}
		for _, sb := range page.Items {
			if sb.State.Terminal() {
				continue
			}
			if _, err := c.TerminateSandbox(ctx, sb.ID); err == nil {
				c.WaitSandbox(ctx, sb.ID, api.StateTerminated, time.Minute)
			}
		}
	}
}

func (s *server) keys() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string{s.adminKey}, s.teamKeys...)
}

// newTeam creates a team and returns a client with its key.
func (s *server) newTeam(name string) *cove.Client {
	s.t.Helper()
	resp, err := s.admin.CreateTeam(context.Background(), name)
	if err != nil {
		s.t.Fatal(err)
	}
	s.mu.Lock()
	s.teamKeys = append(s.teamKeys, resp.APIKey)
	s.mu.Unlock()
	return cove.New(s.url, resp.APIKey)
}

// create makes a running sandbox or fails the test.
func create(t testing.TB, c *cove.Client, req api.CreateSandboxRequest) api.Sandbox {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sb, err := c.CreateSandbox(ctx, req, true)
	if err != nil {
		t.Fatalf("create sandbox: %v", err)
	}
	if sb.State != api.StateRunning {
		t.Fatalf("sandbox %s is %s (%s), want running", sb.ID, sb.State, sb.StateReason)
	}
	return sb
}

// sh runs a shell command to its end and returns its result.
func sh(t testing.TB, c *cove.Client, ref, command string, opts ...func(*api.CreateCommandRequest)) api.CommandResult {
	t.Helper()
	req := api.CreateCommandRequest{Command: command}
	for _, o := range opts {
		o(&req)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := c.ExecWait(ctx, ref, req)
	if err != nil {
		t.Fatalf("exec %q: %v", command, err)
	}
	return res
}

func asRoot(r *api.CreateCommandRequest) { r.User = "root" }

func withTimeout(s int64) func(*api.CreateCommandRequest) {
	return func(r *api.CreateCommandRequest) { r.TimeoutS = &s }
}

func exitCode(r api.CommandResult) int {
	if r.Command.ExitCode == nil {
		return -1
	}
	return *r.Command.ExitCode
}

// mustOK runs a command that must exit 0 and returns its stdout.
func mustOK(t testing.TB, c *cove.Client, ref, command string, opts ...func(*api.CreateCommandRequest)) string {
	t.Helper()
	res := sh(t, c, ref, command, opts...)
	if res.Command.State != api.CommandExited || exitCode(res) != 0 {
		t.Fatalf("%q: state %s exit %d\nstdout: %s\nstderr: %s", command, res.Command.State, exitCode(res), res.Stdout, res.Stderr)
	}
	return res.Stdout
}

// rawRequest sends a request with an explicit key and body, for checks of
// the wire format itself.
func rawRequest(t testing.TB, method, url, key, body string) (int, api.ErrorResponse, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	var er api.ErrorResponse
	_ = json.Unmarshal(b.Bytes(), &er)
	return resp.StatusCode, er, b.Bytes()
}

// removeCgroupParent removes the server's (empty) parent cgroup from every
// hierarchy.
func removeCgroupParent(t testing.TB, parent string) {
	dirs, _ := filepath.Glob("/sys/fs/cgroup/*" + parent)
	for _, d := range dirs {
		if err := os.Remove(d); err != nil && !os.IsNotExist(err) {
			t.Errorf("remove cgroup %s: %v", d, err)
		}
	}
}

// pid is the running server's process ID.
func (s *server) pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return 0
	}
	return s.cmd.Process.Pid
}
