// Package e2etest is the harness of cove's root tests: it runs `cove serve`
// as a real process over real runc, overlayfs and namespaces, and checks it
// from outside through the Go SDK and plain HTTP, as a user would.
//
// Every root test package calls Main from its TestMain, so that root tests
// can live in packages of their own and no package nears the per-package
// test timeout. `go test ./...` runs those packages' binaries at the same
// time, so what a server names on the host is unique across processes: its
// nftables table and cgroup carry the random RunID, and its subnet lies in
// the /16 of the RunOctet, which a process reserves with a lock file for
// its lifetime.
package e2etest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	mrand "math/rand/v2"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/node/image"
	cove "github.com/cove-dev/cove/sdk/go"
)

// Octets is how many test processes can run at once: each holds one octet
// in [0, Octets).
const Octets = 50

// lockDir holds one lock file per octet; a process holds its octet's lock
// (flock, released when the process ends, however it ends) while it runs.
const lockDir = "/run/cove-e2e"

var (
	binDir     string // holds cove and cove-agent
	imagesDir  string // holds the busybox test image
	managedDir string // holds the managed image, when COVE_TEST_IMAGES is set
	runID      string // unique to this process: names tables, cgroups and dirs
	runOctet   int    // unique among running test processes, in [0, Octets)
	skipReason string
	// serverCount numbers the servers of this process.
	serverCount atomic.Int64
)

// BinDir holds the cove and cove-agent binaries under test.
func BinDir() string { return binDir }

// ImagesDir holds the busybox test image.
func ImagesDir() string { return imagesDir }

// ManagedDir holds the managed image; it is empty unless COVE_TEST_IMAGES
// is set.
func ManagedDir() string { return managedDir }

// RunID is random and unique to this test process.
func RunID() string { return runID }

// RunOctet is unique among the test processes running at once, in
// [0, Octets): this process may use 10.(100+RunOctet).0.0/16 (the servers'
// subnets) and 10.(200+RunOctet).0.0/16 (anything else) without meeting
// another's addresses.
func RunOctet() int { return runOctet }

// Main runs the tests of a root test package and exits: call it from
// TestMain. Under -short, or when not root, every test that calls
// RequireRoot (StartServer does) skips. Each of after runs once the tests
// have ended (a shared database's shutdown).
func Main(m *testing.M, after ...func()) {
	os.Exit(run(m, after))
}

func run(m *testing.M, after []func()) int {
	defer func() {
		for _, f := range after {
			f()
		}
	}()
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
	f, octet, err := reserveOctet()
	if err != nil {
		fmt.Fprintln(os.Stderr, "reserve a subnet octet:", err)
		return 1
	}
	defer f.Close() // holds the octet until the tests end
	runOctet = octet

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
	if _, err := image.BuildBusybox(context.Background(), imagesDir, "busybox"); err != nil {
		fmt.Fprintln(os.Stderr, "build busybox image:", err)
		return 1
	}
	managedDir = os.Getenv("COVE_TEST_IMAGES")
	return m.Run()
}

// reserveOctet takes the lock of a free octet, starting at a random one,
// and returns the open (locked) file.
func reserveOctet() (*os.File, int, error) {
	if err := os.MkdirAll(lockDir, 0o755); err != nil {
		return nil, 0, err
	}
	start := mrand.IntN(Octets)
	for i := range Octets {
		n := (start + i) % Octets
		f, err := os.OpenFile(filepath.Join(lockDir, fmt.Sprintf("octet-%d.lock", n)), os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return nil, 0, err
		}
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return f, n, nil
		}
		f.Close()
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, 0, fmt.Errorf("lock %s: %w", f.Name(), err)
		}
	}
	return nil, 0, fmt.Errorf("all %d octets under %s are held by running tests", Octets, lockDir)
}

// RequireRoot skips the test unless Main found root and no -short.
func RequireRoot(t testing.TB) {
	t.Helper()
	if skipReason != "" {
		t.Skip(skipReason)
	}
}

// Server is one `cove serve` process and what it needs to be restarted.
type Server struct {
	URL      string       // the API's base URL, kept across restarts
	AdminKey string       // the admin team's API key
	Admin    *cove.Client // a client with AdminKey
	DataDir  string       // --data-dir
	Home     string       // HOME of the server and of CLI runs
	Cgroup   string       // --cgroup-parent
	Table    string       // nftables table of this server's fence
	Subnet   string       // its sandboxes' link subnet
	Args     []string     // the arguments of `cove` (serve ...)

	t         testing.TB
	extraArgs []string
	managed   bool
	bin       string // holds the cove and cove-agent run; default binDir
	ignore    string // signals `cove serve` starts with ignored (WithIgnoredSignals)

	p         proc
	mu        sync.Mutex
	teamKeys  []string
	listeners map[string]string // what the running server bound, from its ready file
}

// ServerOpt changes how StartServer runs a server.
type ServerOpt func(*Server)

// WithManaged serves the managed image as the default template.
func WithManaged(s *Server) { s.managed = true }

// WithBin runs the cove and cove-agent in dir instead of BinDir's (an
// older build, to test an upgrade); UseBin switches a stopped server.
func WithBin(dir string) ServerOpt { return func(s *Server) { s.bin = dir } }

// UseBin makes the next Start run the cove and cove-agent in dir.
func (s *Server) UseBin(dir string) {
	s.bin = dir
	for i, a := range s.Args[:len(s.Args)-1] {
		if a == "--agent" {
			s.Args[i+1] = filepath.Join(dir, "cove-agent")
		}
	}
}

// WithIgnoredSignals starts `cove serve` with the signals named (as the
// shell's trap names them: "HUP PIPE") ignored, as nohup and a service
// manager's IgnoreSIGPIPE start it.
func WithIgnoredSignals(sigs string) ServerOpt { return func(s *Server) { s.ignore = sigs } }

// WithDataDir serves from dir (a filesystem the test made) instead of a
// data dir of the harness; the test removes it.
func WithDataDir(dir string) ServerOpt {
	return func(s *Server) { s.DataDir = dir }
}

// WithArgs adds arguments to `cove serve`.
func WithArgs(args ...string) ServerOpt {
	return func(s *Server) { s.extraArgs = append(s.extraArgs, args...) }
}

// StartServer runs `cove serve` with its own data dir, cgroup parent and
// nftables table, every listener on port 0 (the ports it bound come from
// its ready file), and registers cleanup that terminates every sandbox.
func StartServer(t testing.TB, opts ...ServerOpt) *Server {
	t.Helper()
	RequireRoot(t)
	dir, err := os.MkdirTemp("/var/tmp", "cove-e2e-srv-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o711)
	s := &Server{
		t: t, DataDir: filepath.Join(dir, "data"), Home: filepath.Join(dir, "home"),
		Cgroup: "/cove-test-" + runID + "-" + filepath.Base(dir)[len("cove-e2e-srv-"):],
	}
	for _, o := range opts {
		o(s)
	}
	if s.bin == "" {
		s.bin = binDir
	}
	n := serverCount.Add(1)
	s.Table = fmt.Sprintf("covet%s%d", runID, n)
	s.Subnet = fmt.Sprintf("10.%d.%d.0/24", 100+runOctet, n%250)
	s.Args = []string{"serve", "--listen", "127.0.0.1:0", "--data-dir", s.DataDir,
		"--agent", filepath.Join(s.bin, "cove-agent"), "--cgroup-parent", s.Cgroup, "--log-level", "debug",
		"--nft-table", s.Table, "--subnet", s.Subnet, "--dns-upstream", "none",
		"--gateway-port", "0", "--dns-port", "0",
		// Test servers share one filesystem and write little to their
		// sandboxes' disks; admission at 1× would make packages that run
		// at once refuse each other's default 4 GiB disks. A test of
		// admission passes its own --disk-overcommit, which wins.
		"--disk-overcommit", "16"}
	if s.managed {
		s.Args = append(s.Args, "--images-dir", managedDir, "--default-template", "managed", "--build-managed=true")
	} else {
		s.Args = append(s.Args, "--images-dir", imagesDir, "--build-managed=false", "--default-template", "busybox")
	}
	s.Args = append(s.Args, s.extraArgs...)
	s.Start()
	b, err := os.ReadFile(filepath.Join(s.DataDir, "admin-api-key"))
	if err != nil {
		t.Fatalf("admin key: %v", err)
	}
	s.AdminKey = strings.TrimSpace(string(b))
	s.Admin = cove.New(s.URL, s.AdminKey)
	if s.managed {
		s.WaitTemplate("managed")
	}
	t.Cleanup(func() {
		s.TerminateAll()
		s.Stop(syscall.SIGTERM)
		RemoveCgroupParent(t, s.Cgroup)
		exec.Command("nft", "delete", "table", "inet", s.Table).Run()
		if t.Failed() {
			t.Logf("server log:\n%s", s.Tail(8000))
		}
		os.RemoveAll(dir)
	})
	return s
}

// WaitTemplate waits until the server's template name is ready: a server
// builds a missing managed image in the background and serves at once,
// and the first build on a machine takes minutes (the image cache is
// shared, under a lock, so later servers find it built).
func (s *Server) WaitTemplate(name string) {
	s.t.Helper()
	deadline := time.Now().Add(15 * time.Minute)
	last := ""
	for time.Now().Before(deadline) {
		var h struct {
			Templates map[string]string `json:"templates"`
		}
		r, err := http.Get(s.URL + "/healthz")
		if err == nil {
			err = json.NewDecoder(r.Body).Decode(&h)
			r.Body.Close()
		}
		if err == nil {
			last = h.Templates[name]
			switch last {
			case "ready":
				return
			case "failed":
				s.t.Fatalf("template %s failed to build:\n%s", name, s.Tail(4000))
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	s.t.Fatalf("template %s is not ready (%q):\n%s", name, last, s.Tail(4000))
}

// ReadyFile is where `cove serve` reports what it bound (the default,
// <data-dir>/ready.json).
func (s *Server) ReadyFile() string { return filepath.Join(s.DataDir, "ready.json") }

// Listeners returns a copy of what the running server bound, by name, from
// its ready file.
func (s *Server) Listeners() map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.listeners)
}

// Start runs the server and waits for its ready file. The first start
// learns the API address; a restart keeps it, as a real server's would
// (clients hold it), while the gateway and resolver take new free ports.
func (s *Server) Start() {
	s.t.Helper()
	// A file left by a killed server must not pass for this one's.
	if err := os.Remove(s.ReadyFile()); err != nil && !os.IsNotExist(err) {
		s.t.Fatal(err)
	}
	bin, args := filepath.Join(s.bin, "cove"), s.Args
	if s.ignore != "" {
		// The shell ignores them, then becomes cove serve (same PID).
		bin, args = "/bin/sh", append([]string{"-c", `trap "" ` + s.ignore + `; exec "$0" "$@"`, bin}, args...)
	}
	done, err := s.p.start(bin, args, []string{"HOME=" + s.Home})
	if err != nil {
		s.t.Fatal(err)
	}

	deadline := time.Now().Add(10 * time.Minute) // a first managed build takes minutes
	for time.Now().Before(deadline) {
		select {
		case <-done:
			s.t.Fatalf("cove serve exited at start:\n%s", s.Tail(4000))
		default:
		}
		b, err := os.ReadFile(s.ReadyFile())
		if err == nil {
			s.ready(b)
			return
		}
		if !os.IsNotExist(err) {
			s.t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.t.Fatalf("cove serve wrote no ready file:\n%s", s.Tail(4000))
}

// ready takes in the ready file of a server that serves.
func (s *Server) ready(b []byte) {
	s.t.Helper()
	var r struct {
		PID       int               `json:"pid"`
		Listeners map[string]string `json:"listeners"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		s.t.Fatalf("ready file %q: %v", b, err)
	}
	api := r.Listeners["api"]
	if r.PID != s.PID() || api == "" {
		s.t.Fatalf("ready file %s: want the pid %d and an api address", b, s.PID())
	}
	if s.URL == "" {
		s.URL = "http://" + api
		for i, a := range s.Args[:len(s.Args)-1] {
			switch {
			case a == "--listen":
				s.Args[i+1] = api
			case a == "--node-listen" && r.Listeners["node"] != "":
				// A restarted control plane keeps the address its
				// nodes were told.
				s.Args[i+1] = r.Listeners["node"]
			}
		}
	} else if s.URL != "http://"+api {
		s.t.Fatalf("restarted on %s, want %s", api, s.URL)
	}
	s.mu.Lock()
	s.listeners = r.Listeners
	s.mu.Unlock()
}

// Stop ends the server with sig and waits for it (killing it after 30s).
func (s *Server) Stop(sig syscall.Signal) { s.p.stop(sig) }

// Tail returns the last n bytes of the server's output, over all its runs.
func (s *Server) Tail(n int) string { return s.p.tail(n) }

// LockedWriter returns a writer that writes to b holding mu, so that a
// test can read b (holding mu) while a process writes to it.
func LockedWriter(mu *sync.Mutex, b *bytes.Buffer) io.Writer { return lockedWriter{mu, b} }

type lockedWriter struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// TerminateAll terminates every live sandbox of every team and waits; it
// does nothing when the server is stopped.
func (s *Server) TerminateAll() {
	if s.PID() == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, key := range s.Keys() {
		c := cove.New(s.URL, key)
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

// Keys returns the admin key, then the key of every team NewTeam made, in
// order.
func (s *Server) Keys() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string{s.AdminKey}, s.teamKeys...)
}

// NewTeam creates a team and returns a client with its key.
func (s *Server) NewTeam(name string) *cove.Client {
	s.t.Helper()
	resp, err := s.Admin.CreateTeam(context.Background(), name)
	if err != nil {
		s.t.Fatal(err)
	}
	s.mu.Lock()
	s.teamKeys = append(s.teamKeys, resp.APIKey)
	s.mu.Unlock()
	return cove.New(s.URL, resp.APIKey)
}

// PID is the running server's process ID, 0 when it is stopped.
func (s *Server) PID() int { return s.p.pid() }

// Create makes a running sandbox or fails the test.
func Create(t testing.TB, c *cove.Client, req api.CreateSandboxRequest) api.Sandbox {
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

// Sh runs a shell command to its end and returns its result.
func Sh(t testing.TB, c *cove.Client, ref, command string, opts ...func(*api.CreateCommandRequest)) api.CommandResult {
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

// AsRoot runs a command as root.
func AsRoot(r *api.CreateCommandRequest) { r.User = "root" }

// WithTimeout gives a command a timeout of s seconds.
func WithTimeout(s int64) func(*api.CreateCommandRequest) {
	return func(r *api.CreateCommandRequest) { r.TimeoutS = &s }
}

// ExitCode is a command's exit code, -1 when it has none.
func ExitCode(r api.CommandResult) int {
	if r.Command.ExitCode == nil {
		return -1
	}
	return *r.Command.ExitCode
}

// MustOK runs a command that must exit 0 and returns its stdout.
func MustOK(t testing.TB, c *cove.Client, ref, command string, opts ...func(*api.CreateCommandRequest)) string {
	t.Helper()
	res := Sh(t, c, ref, command, opts...)
	if res.Command.State != api.CommandExited || ExitCode(res) != 0 {
		t.Fatalf("%q: state %s exit %d\nstdout: %s\nstderr: %s", command, res.Command.State, ExitCode(res), res.Stdout, res.Stderr)
	}
	return res.Stdout
}

// RawRequest sends a request with an explicit key and body, for checks of
// the wire format itself, and returns the status, the body decoded as an
// error response (zero if it is not one) and the body.
func RawRequest(t testing.TB, method, url, key, body string) (int, api.ErrorResponse, []byte) {
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
	_ = json.Unmarshal(b.Bytes(), &er) // not every body is an error response
	return resp.StatusCode, er, b.Bytes()
}

// RemoveCgroupParent removes a server's (empty) parent cgroup from every
// hierarchy.
func RemoveCgroupParent(t testing.TB, parent string) {
	dirs, _ := filepath.Glob("/sys/fs/cgroup/*" + parent)
	for _, d := range dirs {
		if err := os.Remove(d); err != nil && !os.IsNotExist(err) {
			t.Errorf("remove cgroup %s: %v", d, err)
		}
	}
}

// Link is a sandbox's network link, as the node keeps it on disk.
type Link struct {
	HostIface   string     `json:"host_iface"`
	HostAddr    netip.Addr `json:"host_addr"`
	SandboxAddr netip.Addr `json:"sandbox_addr"`
}

// Link reads the network link the server's node keeps for sandbox id.
func (s *Server) Link(t testing.TB, id string) Link {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(s.DataDir, "net", "links", id+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var l Link
	if err := json.Unmarshal(b, &l); err != nil {
		t.Fatal(err)
	}
	return l
}
