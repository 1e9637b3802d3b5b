package e2etest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/mountinfo"
	"github.com/cove-dev/cove/internal/testsupport/s3server"
	cove "github.com/cove-dev/cove/sdk/go"
)

// Fleet is a control plane and the `cove node` processes that joined it,
// on this host, sharing a real S3 server for their saves: each node with
// its own data dir, nftables table, subnet, ports and cgroup parent. The
// control plane is one `cove control`, or several replicas of it on one
// shared store (FleetReplicas) with one secrets key and one join token.
type Fleet struct {
	// Control is the first replica of the control plane (the only one
	// unless FleetReplicas).
	Control *Server
	// Controls are the control plane's replicas, Control first.
	Controls []*Server
	Nodes    []*Node
	S3       *s3server.Server
	// Saves is the --saves URL every process of the fleet is given.
	Saves string
	// Credentials is the --saves-credentials file.
	Credentials string
	// LostAfter is the control plane's --node-lost-after.
	LostAfter time.Duration
	// Store is the control plane's --store, "" for its default.
	Store string

	t   testing.TB
	dir string
}

// FleetOpt changes how StartFleet runs a fleet.
type FleetOpt func(*fleetOpts)

type fleetOpts struct {
	nodes       int
	replicas    int
	store       string
	controlArgs []string
	nodeArgs    []string
	managed     bool
	seed        func(dataDir string)
	lostAfter   time.Duration
}

// FleetLostAfter sets the control plane's --node-lost-after (default 3 s,
// for the tests of a node's loss); tests that lose no node give a longer
// one, so that a loaded machine's late heartbeat loses none either.
func FleetLostAfter(d time.Duration) FleetOpt { return func(o *fleetOpts) { o.lostAfter = d } }

// FleetNodes starts n nodes (default 2).
func FleetNodes(n int) FleetOpt { return func(o *fleetOpts) { o.nodes = n } }

// FleetControlArgs adds arguments to `cove control`.
func FleetControlArgs(args ...string) FleetOpt {
	return func(o *fleetOpts) { o.controlArgs = append(o.controlArgs, args...) }
}

// FleetStore gives every replica of the control plane --store url.
func FleetStore(url string) FleetOpt { return func(o *fleetOpts) { o.store = url } }

// FleetReplicas runs the control plane as n replicas of `cove control`
// (default 1), on the store of FleetStore, which they must share: a
// PostgreSQL database. They share a secrets key and a join token, and
// every node is given all their node listeners.
func FleetReplicas(n int) FleetOpt { return func(o *fleetOpts) { o.replicas = n } }

// FleetNodeArgs adds arguments to every `cove node`.
func FleetNodeArgs(args ...string) FleetOpt {
	return func(o *fleetOpts) { o.nodeArgs = append(o.nodeArgs, args...) }
}

// FleetSeedControl fills the control plane's data dir before its first
// start: a store moved from another install brings its admin team, so
// the control plane writes no admin key of its own and seed puts the
// install's there.
func FleetSeedControl(seed func(dataDir string)) FleetOpt {
	return func(o *fleetOpts) { o.seed = seed }
}

// FleetManaged makes the managed image the default template.
func FleetManaged(o *fleetOpts) { o.managed = true }

// StartFleet starts an S3 server, a control plane and its nodes (named
// node-a, node-b, …), and waits until every node is ready in
// `GET /v1/nodes`. Cleanup terminates every sandbox and stops them all.
func StartFleet(t testing.TB, opts ...FleetOpt) *Fleet {
	t.Helper()
	RequireRoot(t)
	o := fleetOpts{nodes: 2}
	for _, opt := range opts {
		opt(&o)
	}
	dir, err := os.MkdirTemp("/var/tmp", "cove-e2e-fleet-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o711)
	f := &Fleet{t: t, dir: dir, LostAfter: 3 * time.Second}
	if o.lostAfter > 0 {
		f.LostAfter = o.lostAfter
	}
	f.S3 = s3server.Start(t)
	f.Saves = f.S3.PrefixURL("saves-" + runID)
	// The processes get the S3 credentials in a file, never in argv.
	f.Credentials = filepath.Join(dir, "s3-credentials")
	creds := fmt.Sprintf("[default]\naws_access_key_id = %s\naws_secret_access_key = %s\n", f.S3.AccessKey, f.S3.SecretKey)
	if err := os.WriteFile(f.Credentials, []byte(creds), 0o600); err != nil {
		t.Fatal(err)
	}
	template := "busybox"
	images := imagesDir
	if o.managed {
		template, images = "managed", managedDir
	}
	if o.replicas < 1 {
		o.replicas = 1
	}
	if o.replicas > 1 && o.store == "" {
		t.Fatal("StartFleet: replicas need a shared store (FleetStore)")
	}
	f.Store = o.store
	args := []string{"--node-lost-after", f.LostAfter.String(), "--default-template", template,
		"--saves", f.Saves, "--saves-credentials", f.Credentials, "--log-level", "debug"}
	if o.store != "" {
		args = append(args, "--store", o.store)
	}
	if o.replicas > 1 {
		// Replicas open one another's sealed secrets and the fleet's CA
		// key: they share the key that seals them, and nodes join any of
		// them with one token.
		keyFile := filepath.Join(dir, "secrets.key")
		tokenFile := filepath.Join(dir, "join-token-secret")
		if err := os.WriteFile(keyFile, []byte(randomHex(32)+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(tokenFile, []byte("secret"+randomHex(16)+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--secrets-key-file", keyFile, "--join-token-file", tokenFile)
	}
	for i := range o.replicas {
		name := "control"
		if i > 0 {
			name = fmt.Sprintf("control-%d", i+1)
		}
		c := &Server{t: t, DataDir: filepath.Join(dir, name), Home: filepath.Join(dir, "home")}
		c.Args = append(append([]string{"control", "--listen", "127.0.0.1:0", "--node-listen", "127.0.0.1:0",
			"--data-dir", c.DataDir, "--images-dir", filepath.Join(dir, name+"-images")}, args...), o.controlArgs...)
		c.bin = binDir
		if i == 0 && o.seed != nil {
			if err := os.MkdirAll(c.DataDir, 0o700); err != nil {
				t.Fatal(err)
			}
			o.seed(c.DataDir)
		}
		c.Start()
		if i == 0 {
			// The first replica made the admin team; the others share it.
			b, err := os.ReadFile(filepath.Join(c.DataDir, "admin-api-key"))
			if err != nil {
				t.Fatalf("admin key: %v", err)
			}
			c.AdminKey = strings.TrimSpace(string(b))
		} else {
			c.AdminKey = f.Control.AdminKey
		}
		c.Admin = cove.New(c.URL, c.AdminKey)
		if i == 0 {
			f.Control = c
		}
		f.Controls = append(f.Controls, c)
	}
	t.Cleanup(func() {
		if c := f.Running(); c != nil {
			c.TerminateAll()
		}
		for _, n := range f.Nodes {
			n.Stop(syscall.SIGTERM)
			n.KillSandboxes()
			n.cleanup()
		}
		for _, c := range f.Controls {
			c.Stop(syscall.SIGTERM)
		}
		if t.Failed() {
			for _, c := range f.Controls {
				t.Logf("control plane %s log:\n%s", filepath.Base(c.DataDir), c.Tail(6000))
			}
			for _, n := range f.Nodes {
				t.Logf("node %s log:\n%s", n.Name, n.Tail(6000))
			}
		}
		os.RemoveAll(dir)
	})
	for i := range o.nodes {
		f.AddNode(fmt.Sprintf("node-%c", 'a'+i), images, o.nodeArgs...)
	}
	for _, n := range f.Nodes {
		f.WaitNode(n.Name, "ready")
	}
	// Every replica knows the nodes, whichever one they joined through.
	for _, c := range f.Controls[1:] {
		f.waitNodesOf(c, len(f.Nodes))
	}
	for _, c := range f.Controls {
		if o.managed {
			c.WaitTemplate("managed")
		}
		if o.nodes > 0 {
			// Each replica self-tests the template once it is ready in
			// the fleet; tests begin after, so that its sandbox is gone.
			f.waitSelfTest(c, template)
		}
	}
	return f
}

// WaitSelfTest waits until the control plane recorded a self-test of the
// template, and returns it.
func (f *Fleet) WaitSelfTest(template string) api.Template {
	f.t.Helper()
	return f.waitSelfTest(f.Running(), template)
}

func (f *Fleet) waitSelfTest(c *Server, template string) api.Template {
	f.t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	var last api.Template
	for time.Now().Before(deadline) {
		ts, err := c.Admin.Templates(context.Background())
		if err != nil {
			f.t.Fatalf("list templates: %v", err)
		}
		for _, t := range ts {
			if t.Name == template {
				last = t
				if t.SelfTest != nil {
					return t
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	f.t.Fatalf("template %s has no self-test: %+v", template, last)
	return last
}

// NodeListen is the control plane's node listener, from its ready file.
func (f *Fleet) NodeListen() string { return f.Control.Listeners()["node"] }

// JoinTokenFile is the join token the control plane wrote.
func (f *Fleet) JoinTokenFile() string { return filepath.Join(f.Control.DataDir, "join-token") }

// AddNode starts a node that joins the fleet and waits for its ready
// file (not for the control plane to list it ready: WaitNode does).
func (f *Fleet) AddNode(name, images string, args ...string) *Node {
	f.t.Helper()
	n := f.newNode(name, images, f.JoinTokenFile(), args...)
	n.Start()
	return n
}

// AddNodeNoWait starts a node that joins with the token in tokenFile and
// returns at once (a test of a refused join waits for its exit).
func (f *Fleet) AddNodeNoWait(name, tokenFile string, args ...string) *Node {
	f.t.Helper()
	n := f.newNode(name, imagesDir, tokenFile, args...)
	if err := n.StartNoWait(); err != nil {
		f.t.Fatal(err)
	}
	return n
}

func (f *Fleet) newNode(name, images, tokenFile string, args ...string) *Node {
	k := serverCount.Add(1)
	dataDir := filepath.Join(f.dir, name)
	if _, err := os.Stat(dataDir); err == nil {
		// A second process of a name in use (a test of a refused
		// twin) gets a host of its own.
		dataDir = fmt.Sprintf("%s-%d", dataDir, k)
	}
	n := &Node{
		t: f.t, Name: name, DataDir: dataDir,
		Cgroup: fmt.Sprintf("/cove-test-%s-%s-%d", runID, name, k),
		Table:  fmt.Sprintf("covet%s%d", runID, k),
		Subnet: fmt.Sprintf("10.%d.%d.0/24", 100+runOctet, k%250),
	}
	var controls []string
	for _, c := range f.Controls {
		controls = append(controls, "https://"+c.Listeners()["node"])
	}
	n.Args = append([]string{"node", "--control", strings.Join(controls, ","),
		"--join-token-file", tokenFile, "--name", name,
		"--listen", "127.0.0.1:0", "--data-dir", n.DataDir, "--images-dir", images, "--build-managed=false",
		"--agent", filepath.Join(binDir, "cove-agent"), "--cgroup-parent", n.Cgroup, "--log-level", "debug",
		"--nft-table", n.Table, "--subnet", n.Subnet, "--dns-upstream", "none",
		"--gateway-port", "0", "--dns-port", "0", "--disk-overcommit", "16",
		"--saves", f.Saves, "--saves-credentials", f.Credentials}, args...)
	f.Nodes = append(f.Nodes, n)
	return n
}

// Node returns the node of that name.
func (f *Fleet) Node(name string) *Node {
	for _, n := range f.Nodes {
		if n.Name == name {
			return n
		}
	}
	f.t.Fatalf("no node %s", name)
	return nil
}

// FleetNode is a node as `GET /v1/nodes` lists it.
type FleetNode struct {
	ID        string         `json:"id"`
	Name      string         `json:"name"`
	State     string         `json:"state"`
	Addr      string         `json:"addr"`
	Capacity  map[string]any `json:"capacity"`
	Reserved  map[string]any `json:"reserved"`
	Sandboxes int            `json:"sandboxes"`
}

// ListNodes lists the fleet's nodes as the admin sees them.
func (f *Fleet) ListNodes() []FleetNode {
	f.t.Helper()
	return f.ListNodesOf(f.Running())
}

// ListNodesOf lists the fleet's nodes as one replica shows them.
func (f *Fleet) ListNodesOf(c *Server) []FleetNode {
	f.t.Helper()
	code, _, body := RawRequest(f.t, "GET", c.URL+"/v1/nodes", c.AdminKey, "")
	if code != 200 {
		f.t.Fatalf("GET /v1/nodes: %d %s", code, body)
	}
	var l struct {
		Items []FleetNode `json:"items"`
	}
	if err := json.Unmarshal(body, &l); err != nil {
		f.t.Fatalf("GET /v1/nodes: %v: %s", err, body)
	}
	return l.Items
}

// waitNodesOf waits until replica c lists n nodes ready.
func (f *Fleet) waitNodesOf(c *Server, n int) {
	f.t.Helper()
	deadline := time.Now().Add(time.Minute)
	var last []FleetNode
	for time.Now().Before(deadline) {
		last = f.ListNodesOf(c)
		ready := 0
		for _, n := range last {
			if n.State == "ready" {
				ready++
			}
		}
		if ready == n {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	f.t.Fatalf("replica %s lists %+v, want %d nodes ready", c.URL, last, n)
}

// WaitNode waits until the node named is in state (ready, draining,
// lost) in the control plane's list.
func (f *Fleet) WaitNode(name, state string) FleetNode {
	f.t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	var last FleetNode
	for time.Now().Before(deadline) {
		for _, n := range f.ListNodes() {
			if n.Name == name {
				last = n
				if n.State == state {
					return n
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	f.t.Fatalf("node %s is not %s: %+v", name, state, last)
	return last
}

// Node is one `cove node` process.
type Node struct {
	Name    string
	DataDir string
	Cgroup  string
	Table   string
	Subnet  string
	Args    []string

	t     testing.TB
	p     proc
	done  <-chan struct{} // of the run StartNoWait began
	mu    sync.Mutex
	ready Ready
}

// Ready is what a server process's ready file holds.
type Ready struct {
	PID       int               `json:"pid"`
	Listeners map[string]string `json:"listeners"`
}

// ReadyFile is where the node reports what it bound.
func (n *Node) ReadyFile() string { return filepath.Join(n.DataDir, "ready.json") }

// Addr is the node API's address, from its ready file.
func (n *Node) Addr() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.ready.Listeners["node"]
}

// Start runs the node and waits for its ready file.
func (n *Node) Start() {
	n.t.Helper()
	if err := n.StartNoWait(); err != nil {
		n.t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Minute)
	for time.Now().Before(deadline) {
		select {
		case <-n.done:
			n.t.Fatalf("cove node %s exited at start:\n%s", n.Name, n.Tail(4000))
		default:
		}
		b, err := os.ReadFile(n.ReadyFile())
		if err == nil {
			var r Ready
			if err := json.Unmarshal(b, &r); err != nil {
				n.t.Fatalf("ready file %q: %v", b, err)
			}
			if r.PID == n.PID() && r.Listeners["node"] != "" {
				n.mu.Lock()
				n.ready = r
				n.mu.Unlock()
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	n.t.Fatalf("cove node %s wrote no ready file:\n%s", n.Name, n.Tail(4000))
}

// StartNoWait runs the node without waiting for it to serve.
func (n *Node) StartNoWait() error {
	if err := os.Remove(n.ReadyFile()); err != nil && !os.IsNotExist(err) {
		return err
	}
	done, err := n.p.start(filepath.Join(binDir, "cove"), n.Args, nil)
	if err != nil {
		return err
	}
	n.done = done
	return nil
}

// Wait waits for the node process to end by itself and returns its exit
// code.
func (n *Node) Wait(d time.Duration) int {
	n.t.Helper()
	code, ok := n.p.wait(d)
	if !ok {
		n.t.Fatalf("cove node %s still runs after %v:\n%s", n.Name, d, n.Tail(4000))
	}
	return code
}

// PID is the running node's process ID, 0 when stopped.
func (n *Node) PID() int { return n.p.pid() }

// Stop ends the node process with sig (SIGKILL: as a crash) and waits.
// Its sandboxes keep running either way.
func (n *Node) Stop(sig syscall.Signal) { n.p.stop(sig) }

// KillSandboxes kills every process of the node's sandboxes, as a host
// that lost power would lose them, and waits until none is left.
func (n *Node) KillSandboxes() {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		pids := n.SandboxPIDs()
		if len(pids) == 0 {
			return
		}
		for _, pid := range pids {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(20 * time.Millisecond)
	}
	n.t.Errorf("node %s: sandbox processes survive SIGKILL: %v", n.Name, n.SandboxPIDs())
}

// SandboxPIDs are the processes in the node's sandboxes' cgroups: those
// of the sandboxes named, or of all when none is.
func (n *Node) SandboxPIDs(sandboxes ...string) []int {
	var pids []int
	seen := map[int]bool{}
	root := "/sys/fs/cgroup/pids" + n.Cgroup
	if _, err := os.Stat(root); err != nil {
		root = "/sys/fs/cgroup/unified" + n.Cgroup
	}
	filepath.Walk(root, func(p string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() || info.Name() != "cgroup.procs" {
			return nil
		}
		if len(sandboxes) > 0 && !slices.ContainsFunc(sandboxes, func(id string) bool {
			return strings.Contains(p, "/"+id+"/")
		}) {
			return nil
		}
		b, _ := os.ReadFile(p)
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil && !seen[pid] {
				seen[pid] = true
				pids = append(pids, pid)
			}
		}
		return nil
	})
	return pids
}

// Tail returns the last n bytes the node printed, over all its runs.
func (n *Node) Tail(max int) string { return n.p.tail(max) }

// cleanup removes what the node left on the host: its cgroups, its
// nftables table and its containers' state.
func (n *Node) cleanup() {
	exec.Command("nft", "delete", "table", "inet", n.Table).Run()
	// A node killed with its sandboxes leaves their mounts and loop
	// devices; one that came back has removed them itself.
	mounts, _ := mountinfo.Under(n.DataDir)
	for i := len(mounts) - 1; i >= 0; i-- {
		syscall.Unmount(mounts[i], syscall.MNT_DETACH)
	}
	if out, err := exec.Command("losetup", "-a").Output(); err == nil {
		for _, line := range strings.Split(string(out), "\n") {
			if dev, _, ok := strings.Cut(line, ":"); ok && strings.Contains(line, n.DataDir+"/") {
				exec.Command("losetup", "-d", dev).Run()
			}
		}
	}
	for i := 0; i < 50; i++ {
		dirs, _ := filepath.Glob("/sys/fs/cgroup/*" + n.Cgroup)
		left := 0
		for _, d := range dirs {
			if err := removeCgroupTree(d); err != nil {
				left++
			}
		}
		if left == 0 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	n.t.Errorf("node %s: cgroups left under %s", n.Name, n.Cgroup)
}

// removeCgroupTree removes a cgroup and its children, deepest first.
func removeCgroupTree(dir string) error {
	var dirs []string
	filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err == nil && info.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	var last error
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := os.Remove(dirs[i]); err != nil && !os.IsNotExist(err) {
			last = err
		}
	}
	return last
}
