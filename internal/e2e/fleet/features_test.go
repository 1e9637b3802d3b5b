package fleet

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
	cove "github.com/cove-dev/cove/sdk/go"
)

// cpuPrice is what one CPU costs a second in TestFeaturesThroughFleet: a
// cent, so that a spend limit is reached within seconds.
const cpuPrice = 0.01

// TestFeaturesThroughFleet: what `cove serve` offers besides commands and
// files works the same when the sandbox runs on a node of its own: the
// fence's denials come back as observations and events, samples and costs
// are metered and limits enforced by the control plane, secrets reach the
// command and are redacted from what it recorded, a git source is cloned
// and a setup run on the node, and workloads run there (those asking for
// GPUs only where a node has them). One fleet serves every subtest.
func TestFeaturesThroughFleet(t *testing.T) {
	if e2etest.ManagedDir() == "" {
		t.Skip("COVE_TEST_IMAGES is not set: these tests use git, curl and python3 of the managed image")
	}
	root, head := gitRepo(t)
	host := e2etest.StartTestHost(t)
	git := gitBackend(t, root)
	host.ServeHTTP(t, host.Addr.String()+":80", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/pkg" {
			fmt.Fprint(w, "package-bytes")
			return
		}
		git.ServeHTTP(w, r)
	}))
	prices := filepath.Join(t.TempDir(), "prices.json")
	if err := os.WriteFile(prices, []byte(fmt.Sprintf(`{"vcpu_second_usd": %v, "memory_gib_second_usd": 0, "storage_gib_hour_usd": 0, "egress_gb_usd": 0}`, cpuPrice)), 0o644); err != nil {
		t.Fatal(err)
	}
	f := e2etest.StartFleet(t, e2etest.FleetManaged, e2etest.FleetNodes(1),
		e2etest.FleetControlArgs("--metrics-interval", "500ms", "--prices", prices),
		// The node's resolver knows the test host; its GPUs are read
		// from an empty CDI directory: whatever this host has, the node
		// has none.
		e2etest.FleetNodeArgs("--dns-static", "git.test="+host.Addr.String(), "--cdi-spec-dirs", t.TempDir()))
	c := f.Control.Admin

	t.Run("network observation and denial", func(t *testing.T) {
		sb := e2etest.Create(t, c, api.CreateSandboxRequest{Network: &api.NetworkPolicy{Allow: []string{}}})
		res := e2etest.Sh(t, c, sb.ID, "curl -sS --fail --max-time 5 http://"+host.Addr.String()+"/pkg", e2etest.WithTimeout(20))
		if e2etest.ExitCode(res) == 0 || strings.Contains(res.Stdout, "package-bytes") {
			t.Fatalf("a denied connection got through: %+v", res)
		}
		waitFor(t, "a denied observation of "+host.Addr.String()+":80", func() (bool, string) {
			v, err := c.Network(t.Context(), sb.ID)
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range v.Observations {
				if o.Destination == host.Addr.String() && o.Port == 80 && o.Decision == "denied" {
					return o.LastCommandID == res.Command.ID, fmt.Sprintf("%+v", o)
				}
			}
			return false, fmt.Sprintf("%+v", v.Observations)
		})
		waitFor(t, "a network.denied event", func() (bool, string) {
			l, err := c.Events(t.Context(), cove.EventQuery{Sandbox: sb.ID, Types: []string{"network.denied"}, Limit: 100})
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range l.Items {
				if e.Data["destination"] == host.Addr.String() {
					return true, ""
				}
			}
			return false, fmt.Sprintf("%+v", l.Items)
		})
	})

	t.Run("metrics and costs", func(t *testing.T) {
		sb := e2etest.Create(t, c, api.CreateSandboxRequest{})
		e2etest.MustOK(t, c, sb.ID, "timeout 3 sh -c 'while :; do :; done' || true")
		waitFor(t, "a busy sample and a cost", func() (bool, string) {
			m, err := c.Metrics(t.Context(), sb.ID, cove.MetricsQuery{From: sb.CreatedAt, To: time.Now().Add(time.Second), Step: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			var top, mem int64
			for _, s := range m.Samples {
				top, mem = max(top, s.CPUMillicores), max(mem, s.MemoryBytes)
			}
			u, err := c.SandboxUsage(t.Context(), sb.ID)
			if err != nil {
				t.Fatal(err)
			}
			// The loop had a CPU for 3 s. On a loaded host it gets a
			// share of one, but a sample far above an idle sandbox's
			// (a few millicores) shows the node's metrics came through.
			return top > 100 && mem > 0 && u.CPUS >= 1 && u.CostUSD >= cpuPrice,
				fmt.Sprintf("%d samples, busiest %d millicores, memory %d; usage %+v", len(m.Samples), top, mem, u)
		})
		r, err := c.Usage(t.Context(), cove.UsageQuery{GroupBy: "sandbox"})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(r.Items, func(i api.Usage) bool { return i.SandboxID == sb.ID && i.CostUSD > 0 }) {
			t.Errorf("usage by sandbox lacks %s: %+v", sb.ID, r.Items)
		}
	})

	t.Run("spend limit puts to sleep", func(t *testing.T) {
		limit := 0.02 // about 2 s of one CPU
		sb := e2etest.Create(t, c, api.CreateSandboxRequest{SpendLimitUSD: &limit})
		got, err := c.WaitSandbox(t.Context(), sb.ID, api.StateAsleep, 2*time.Minute)
		if err != nil || got.State != api.StateAsleep {
			t.Fatalf("over its limit: %s (%s), %v", got.State, got.StateReason, err)
		}
		l, err := c.Events(t.Context(), cove.EventQuery{Sandbox: sb.ID, Types: []string{"budget.exceeded"}, Limit: 10})
		if err != nil || len(l.Items) != 1 {
			t.Errorf("budget.exceeded events: %+v, %v", l.Items, err)
		}
		if _, err := c.Exec(t.Context(), sb.ID, api.CreateCommandRequest{Command: "true"}); api.ErrorCode(err) != api.CodeBudgetExceeded {
			t.Errorf("a command over the limit: %v; want budget_exceeded", err)
		}
		// Other subtests' sandboxes run there too: only this one's
		// processes are looked for.
		if pids := sandboxPIDs(f, sb.ID); len(pids) > 0 {
			t.Errorf("the sandbox asleep over its limit still has processes on the node: %v", pids)
		}
	})

	t.Run("secrets", func(t *testing.T) {
		b := make([]byte, 16)
		rand.Read(b)
		value := "cove-fleet-secret-" + hex.EncodeToString(b)
		if _, err := c.PutSecret(t.Context(), "tok", value); err != nil {
			t.Fatal(err)
		}
		sb := e2etest.Create(t, c, api.CreateSandboxRequest{Secrets: map[string]api.SecretRef{"TOKEN": {Secret: "tok"}}})
		res := e2etest.Sh(t, c, sb.ID, `printf 'x %s y\n' "$TOKEN"; printf %s "$TOKEN" | sha256sum | cut -c1-64`)
		sum := sha256.Sum256([]byte(value))
		if want := "x [secret:tok] y\n" + hex.EncodeToString(sum[:]) + "\n"; res.Stdout != want {
			t.Fatalf("stdout %q; want %q", res.Stdout, want)
		}
		// Recorded output read back later, through the node's output.
		var nd strings.Builder
		if err := c.Output(t.Context(), sb.ID, res.Command.ID, 0, false, func(r api.OutputRecord) error {
			nd.Write(r.Data)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(nd.String(), value) || !strings.HasPrefix(nd.String(), "x [secret:tok] y\n") {
			t.Errorf("recorded output %q", nd.String())
		}
		// The control plane's log and the node's say nothing of it.
		for name, log := range map[string]string{"control plane": f.Control.Tail(1 << 30), "node": f.Node("node-a").Tail(1 << 30)} {
			if strings.Contains(log, value) {
				t.Errorf("the %s's log holds the secret's value", name)
			}
		}
	})

	t.Run("git source and setup", func(t *testing.T) {
		url := "http://git.test/public.git"
		sb, err := c.CreateSandbox(t.Context(), api.CreateSandboxRequest{
			Source:  &api.Source{Type: api.SourceGit, URL: url, Ref: "main"},
			Network: &api.NetworkPolicy{Allow: []string{}},
			Setup: &api.Setup{
				Command: "echo setting up; cat /workspace/a.txt > /workspace/setup.txt; curl -sS --max-time 10 --retry 3 --retry-all-errors --retry-delay 1 http://git.test/pkg > /workspace/pkg.txt",
				Network: &api.NetworkPolicy{Allow: []string{"git.test"}},
			},
		}, true)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.TerminateSandbox(t.Context(), sb.ID) })
		if sb.State != api.StateRunning || sb.Source.Digest != head || sb.SetupCommandID == "" {
			t.Fatalf("sandbox: %s (%s), digest %q (want %s), setup %q", sb.State, sb.StateReason, sb.Source.Digest, head, sb.SetupCommandID)
		}
		out := e2etest.MustOK(t, c, sb.ID, "cd /workspace && git log --format=%H -1 && cat setup.txt pkg.txt")
		if want := head + "\none\npackage-bytes"; out != want {
			t.Fatalf("inside: %q; want %q", out, want)
		}
		res, err := c.ExecWait(t.Context(), sb.ID, api.CreateCommandRequest{Command: "true"})
		if err != nil || e2etest.ExitCode(res) != 0 {
			t.Fatalf("a command after setup: %+v, %v", res, err)
		}
		var setup strings.Builder
		if err := c.Output(t.Context(), sb.ID, sb.SetupCommandID, 0, false, func(r api.OutputRecord) error {
			setup.Write(r.Data)
			return nil
		}); err != nil || setup.String() != "setting up\n" {
			t.Errorf("setup output %q, %v", setup.String(), err)
		}
	})

	t.Run("workloads", func(t *testing.T) {
		w, err := c.SubmitWorkload(t.Context(), api.CreateWorkloadRequest{Command: "echo on the node; echo oops >&2; exit 3", Resources: &api.WorkloadResourcesRequest{}})
		if err != nil {
			t.Fatal(err)
		}
		gpu, err := c.SubmitWorkload(t.Context(), api.CreateWorkloadRequest{Command: "nvidia-smi", Resources: &api.WorkloadResourcesRequest{GPUs: 1}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.CancelWorkload(t.Context(), gpu.ID) })
		done, err := c.WaitWorkload(t.Context(), w.ID, api.WorkloadExited, 2*time.Minute)
		if err != nil || done.State != api.WorkloadExited || done.ExitCode == nil || *done.ExitCode != 3 {
			t.Fatalf("workload: %+v, %v", done, err)
		}
		var stdout, stderr strings.Builder
		if _, err := c.WorkloadStdout(t.Context(), w.ID, &stdout); err != nil || stdout.String() != "on the node\n" {
			t.Errorf("stdout %q, %v", stdout.String(), err)
		}
		if _, err := c.WorkloadStderr(t.Context(), w.ID, &stderr); err != nil || stderr.String() != "oops\n" {
			t.Errorf("stderr %q, %v", stderr.String(), err)
		}
		// No node has GPUs: the GPU workload waits, saying why.
		waitFor(t, "the GPU workload queued for want of GPUs", func() (bool, string) {
			cur, err := c.GetWorkload(t.Context(), gpu.ID)
			if err != nil {
				t.Fatal(err)
			}
			if cur.State != api.WorkloadQueued {
				t.Fatalf("a GPU workload in a fleet without GPUs: %+v", cur)
			}
			return strings.Contains(cur.StateReason, "no node has GPUs"), cur.StateReason
		})
	})
}

// waitFor polls cond until it holds, for a minute at most.
func waitFor(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		ok, last := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s within a minute: %s", what, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// sandboxPIDs are the processes in the cgroups of one sandbox on any
// node of the fleet.
func sandboxPIDs(f *e2etest.Fleet, id string) []string {
	var pids []string
	for _, n := range f.Nodes {
		dirs, _ := filepath.Glob("/sys/fs/cgroup/*" + n.Cgroup + "/" + id)
		for _, d := range dirs {
			filepath.Walk(d, func(p string, info os.FileInfo, err error) error {
				if err == nil && !info.IsDir() && info.Name() == "cgroup.procs" {
					b, _ := os.ReadFile(p)
					pids = append(pids, strings.Fields(string(b))...)
				}
				return nil
			})
		}
	}
	return pids
}

func gitCmd(t *testing.T, dir string, args ...string) string {
	t.Helper()
	c := exec.Command("git", args...)
	c.Dir = dir
	c.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t", "GIT_CONFIG_GLOBAL=/dev/null")
	out, err := c.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// gitRepo makes public.git (main, one commit with a.txt) under a root the
// CGI git http-backend serves, and returns the root and main's commit.
func gitRepo(t *testing.T) (root, head string) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	root, work := t.TempDir(), t.TempDir()
	gitCmd(t, work, "init", "-q", "-b", "main")
	os.WriteFile(filepath.Join(work, "a.txt"), []byte("one\n"), 0o644)
	gitCmd(t, work, "add", ".")
	gitCmd(t, work, "commit", "-qm", "first")
	head = gitCmd(t, work, "rev-parse", "HEAD")
	gitCmd(t, root, "clone", "-q", "--bare", work, "public.git")
	return root, head
}

func gitBackend(t *testing.T, root string) http.Handler {
	t.Helper()
	execPath := gitCmd(t, root, "--exec-path")
	return &cgi.Handler{Path: filepath.Join(execPath, "git-http-backend"), Env: []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1"}}
}
