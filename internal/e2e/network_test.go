package e2e

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
)

// netSandbox starts a server on the managed image whose resolver knows the
// test hosts by name, and a sandbox in it with the given policy and the
// test CA in /workspace/ca.pem.
func netSandbox(t *testing.T, allow ...string) (*e2etest.Server, *testHosts, api.Sandbox) {
	t.Helper()
	e2etest.RequireRoot(t)
	if e2etest.ManagedDir() == "" {
		t.Skip("COVE_TEST_IMAGES is not set: network tests use curl and python3 of the managed image")
	}
	h := startTestHosts(t)
	var static []string
	for _, name := range []string{"web.test", "tls.test", "other.test", "echo.test"} {
		static = append(static, "--dns-static", name+"="+h.Addr)
	}
	static = append(static, "--dns-static", "meta.test=169.254.169.254")
	s := e2etest.StartServer(t, e2etest.WithManaged, e2etest.WithArgs(static...))
	sb := e2etest.Create(t, s.Admin, api.CreateSandboxRequest{Network: &api.NetworkPolicy{Allow: allow}})
	if _, err := s.Admin.WriteFile(t.Context(), sb.ID, "/workspace/ca.pem", strings.NewReader(string(h.CAPEM))); err != nil {
		t.Fatal(err)
	}
	return s, h, sb
}

// try runs a shell command in the sandbox and returns its output and how
// long it took; it must end within 10 s (nothing hangs).
func try(t *testing.T, s *e2etest.Server, id, command string) (string, int, time.Duration) {
	t.Helper()
	start := time.Now()
	res := e2etest.Sh(t, s.Admin, id, command, e2etest.WithTimeout(10))
	if res.Command.State == api.CommandTimedOut {
		t.Errorf("%q hung", command)
	}
	return res.Stdout + res.Stderr, e2etest.ExitCode(res), time.Since(start)
}

func observation(t *testing.T, s *e2etest.Server, id, dest string, port int) (api.NetworkObservation, bool) {
	t.Helper()
	v, err := s.Admin.Network(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range v.Observations {
		if o.Destination == dest && o.Port == port {
			return o, true
		}
	}
	return api.NetworkObservation{}, false
}

const curl = "curl -sS --fail --max-time 5 --cacert /workspace/ca.pem "

func TestNetworkDefaultDeny(t *testing.T) {
	s, h, sb := netSandbox(t)
	for _, c := range []struct {
		name, command, dest string
		port                int
	}{
		{"by name", curl + "http://web.test/", "web.test", 53},
		{"by IP, HTTP", curl + "http://" + h.Addr + "/", h.Addr, 80},
		{"by IP, TLS", curl + "https://" + h.Addr + "/", h.Addr, 443},
		{"by IP, raw", "python3 -c 'import socket; s=socket.create_connection((\"" + h.Addr + "\", 7), 5); s.sendall(b\"x\"); print(s.recv(10))'", h.Addr, 7},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, code, took := try(t, s, sb.ID, c.command)
			if code == 0 {
				t.Errorf("%s: reached: %q", c.command, out)
			}
			if took > 3*time.Second {
				t.Errorf("%s: took %v to fail, want under 2 s (plus the command's start)", c.command, took)
			}
			if o, ok := observation(t, s, sb.ID, c.dest, c.port); !ok || o.Decision != "denied" {
				t.Errorf("no denied observation for %s:%d: %+v", c.dest, c.port, o)
			}
		})
	}
	if h.HTTPHits.Load() != 0 {
		t.Errorf("the test hosts were reached %d times", h.HTTPHits.Load())
	}
	if evs := events(t, s, "sandbox="+sb.ID+"&type=network.denied"); len(evs) < 3 {
		t.Errorf("network.denied events: %d, want one per destination", len(evs))
	}
	// A denied plain-HTTP request says why.
	out, _, _ := try(t, s, sb.ID, "curl -s --max-time 5 http://"+h.Addr+"/")
	if !strings.Contains(out, "allow it with PATCH /v1/sandboxes/"+sb.ID) {
		t.Errorf("denied HTTP body: %q", out)
	}
}

func TestNetworkAllowAndObserve(t *testing.T) {
	s, _, sb := netSandbox(t, "web.test", "tls.test:443")
	if out, code, _ := try(t, s, sb.ID, curl+"http://web.test/"); code != 0 || out != "hello from web.test" {
		t.Errorf("allowed HTTP: %q %d", out, code)
	}
	if out, code, _ := try(t, s, sb.ID, curl+"https://tls.test/"); code != 0 || out != "hello from tls.test" {
		t.Errorf("allowed TLS: %q %d", out, code)
	}
	// Bytes: 4 MiB down and 2 MiB up through the gateway.
	const down, up = 4 << 20, 2 << 20
	if out, code, _ := try(t, s, sb.ID, fmt.Sprintf(curl+"-o /dev/null -w '%%{size_download}' 'http://web.test/?bytes=%d'", down)); code != 0 || out != fmt.Sprint(down) {
		t.Fatalf("download: %q %d", out, code)
	}
	if out, code, _ := try(t, s, sb.ID, fmt.Sprintf("head -c %d /dev/zero > /tmp/up && "+curl+"--data-binary @/tmp/up http://web.test/", up)); code != 0 || out != fmt.Sprintf("got %d", up) {
		t.Fatalf("upload: %q %d", out, code)
	}
	o, ok := observation(t, s, sb.ID, "web.test", 80)
	if !ok || o.Decision != "allowed" || o.Count != 3 {
		t.Fatalf("web.test observation: %+v", o)
	}
	within := func(got, want int64) bool { return got >= want && float64(got) <= float64(want)*1.05 }
	if !within(o.BytesIn, down) || !within(o.BytesOut, up) {
		t.Errorf("bytes in %d (sent to it ≥ %d), out %d (≥ %d): not within 5%%", o.BytesIn, down, o.BytesOut, up)
	}
	if o, ok := observation(t, s, sb.ID, "tls.test", 443); !ok || o.Decision != "allowed" || o.BytesIn == 0 {
		t.Errorf("tls.test observation: %+v", o)
	}
}

func TestNetworkRules(t *testing.T) {
	s, h, sb := netSandbox(t)
	patch := func(allow ...string) {
		t.Helper()
		if _, err := s.Admin.UpdateSandbox(t.Context(), sb.ID, api.UpdateSandboxRequest{Network: &api.NetworkPolicy{Allow: allow}}); err != nil {
			t.Fatal(err)
		}
	}
	echo := fmt.Sprintf("python3 -c 'import socket; s=socket.create_connection((\"%s\", 7), 5); s.sendall(b\"ping\"); print(s.recv(10).decode())'", h.Addr)
	check := func(cases []struct {
		command string
		ok      bool
	}) {
		t.Helper()
		for _, c := range cases {
			out, code, _ := try(t, s, sb.ID, c.command)
			if (code == 0) != c.ok {
				t.Errorf("%s: exit %d %q, want allowed=%v", c.command, code, out, c.ok)
			}
		}
	}
	// A CIDR:port rule opens the raw echo and nothing else.
	patch(h.Addr + "/32:7")
	check([]struct {
		command string
		ok      bool
	}{
		{echo, true},
		{curl + "http://" + h.Addr + "/", false},
		{curl + "https://" + h.Addr + "/ -k", false},
		{curl + "http://web.test/", false},
	})
	if o, ok := observation(t, s, sb.ID, h.Addr, 7); !ok || o.Decision != "allowed" {
		t.Errorf("echo observation: %+v", o)
	}
	// Wildcards and ports as written.
	patch("*.test:80")
	check([]struct {
		command string
		ok      bool
	}{
		{curl + "http://web.test/", true},
		{curl + "http://other.test/", true},
		{curl + "https://tls.test/", false}, // port 443 is not granted
		{echo, false},                       // nor port 7
	})
	if o, ok := observation(t, s, sb.ID, "tls.test", 443); !ok || o.Decision != "denied" {
		t.Errorf("tls.test:443 observation: %+v", o)
	}
}

func TestNetworkBypassAttempts(t *testing.T) {
	s, h, sb := netSandbox(t, "web.test", "tls.test")
	apiPort := strings.TrimPrefix(s.URL, "http://127.0.0.1:")
	hostSide := strings.TrimSuffix(s.Subnet, "0/24") + "1"
	for _, c := range []struct{ name, command string }{
		{"allowed IP with a denied SNI", curl + "--resolve other.test:443:" + h.Addr + " https://other.test/"},
		{"Host header naming a denied host", curl + "-H 'Host: other.test' http://web.test/ -o /dev/null -w '%{http_code}' --fail"},
		{"DNS for a denied name", "python3 -c 'import socket; print(socket.gethostbyname(\"other.test\"))'"},
		{"metadata address", curl + "http://169.254.169.254/"},
		{"metadata by a name", curl + "http://meta.test/"},
		{"the host's API port", curl + "http://" + hostSide + ":" + apiPort + "/healthz"},
		{"the host's loopback", curl + "http://127.0.0.1:" + apiPort + "/healthz"},
		{"CONNECT to a denied host", curl + "-x http://web.test:80 https://other.test/"},
		{"CONNECT to the metadata address", curl + "-x http://web.test:80 http://169.254.169.254/ --proxytunnel"},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, code, took := try(t, s, sb.ID, c.command)
			if code == 0 {
				t.Errorf("bypass worked: %q", out)
			}
			if took > 4*time.Second {
				t.Errorf("took %v", took)
			}
		})
	}
	// UDP to anything but the resolver goes nowhere.
	try(t, s, sb.ID, "python3 -c 'import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); [s.sendto(b\"x\", (\""+h.Addr+"\", 9999)) for _ in range(5)]'")
	time.Sleep(200 * time.Millisecond)
	if n := h.UDPHits.Load(); n != 0 {
		t.Errorf("the UDP sink got %d datagrams", n)
	}
	if n := h.MetaHits.Load(); n != 0 {
		t.Errorf("the metadata server was reached %d times", n)
	}
	if o, ok := observation(t, s, sb.ID, "other.test", 443); !ok || o.Decision != "denied" {
		t.Errorf("spoofed SNI not observed as denied: %+v", o)
	}
	// Only what was allowed reached the test hosts: none of the above.
	before := h.HTTPHits.Load()
	if out, code, _ := try(t, s, sb.ID, curl+"http://web.test/"); code != 0 || out != "hello from web.test" {
		t.Errorf("the allowed name stopped working: %q", out)
	}
	if h.HTTPHits.Load() != before+1 {
		t.Errorf("HTTP hits %d → %d", before, h.HTTPHits.Load())
	}
}

func TestNetworkLivePatchAndTerminate(t *testing.T) {
	s, _, sb := netSandbox(t)
	if _, code, _ := try(t, s, sb.ID, curl+"http://web.test/"); code == 0 {
		t.Fatal("reached web.test before it was allowed")
	}
	if _, err := s.Admin.UpdateSandbox(t.Context(), sb.ID, api.UpdateSandboxRequest{Network: &api.NetworkPolicy{Allow: []string{"web.test"}}}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	out, code, _ := try(t, s, sb.ID, curl+"http://web.test/")
	if code != 0 || out != "hello from web.test" {
		t.Errorf("after PATCH: %q %d", out, code)
	}
	if d := time.Since(start); d > time.Second+500*time.Millisecond {
		t.Errorf("the new policy took %v", d)
	}
	if v, _ := s.Admin.Network(t.Context(), sb.ID); len(v.Policy.Allow) != 1 {
		t.Errorf("policy now %+v", v.Policy)
	}
	iface := ifaceOf(t, s, sb.ID)
	if _, err := s.Admin.TerminateSandbox(t.Context(), sb.ID); err != nil {
		t.Fatal(err)
	}
	s.Admin.WaitSandbox(t.Context(), sb.ID, api.StateTerminated, time.Minute)
	if out, err := exec.Command("ip", "link", "show", iface).CombinedOutput(); err == nil {
		t.Errorf("veth %s left: %s", iface, out)
	}
	if out, _ := exec.Command("nft", "list", "set", "inet", s.Table, "sandboxes").CombinedOutput(); strings.Contains(string(out), iface) {
		t.Errorf("nft set still names %s:\n%s", iface, out)
	}
	// The gateway forgets the sandbox; what it did stays in its history.
	if o, ok := observation(t, s, sb.ID, "web.test", 80); !ok || o.Decision != "allowed" {
		t.Errorf("observations after terminate: %+v", o)
	}
	if left := settledLeftovers(t, s, sb.ID); len(left) > 0 {
		t.Errorf("left:\n%s", strings.Join(left, "\n"))
	}
}

// ifaceOf finds the host side of a sandbox's veth from its link file.
func ifaceOf(t *testing.T, s *e2etest.Server, id string) string {
	t.Helper()
	out, err := exec.Command("sh", "-c", "grep -o '\"host_iface\":\"[^\"]*\"' "+s.DataDir+"/net/links/"+id+".json | cut -d'\"' -f4").Output()
	if err != nil || strings.TrimSpace(string(out)) == "" {
		t.Fatalf("link of %s: %v", id, err)
	}
	return strings.TrimSpace(string(out))
}

// TestNetworkPolicyValidation: policies are validated, stored, and the
// setup policy is kept apart from the normal one.
func TestNetworkPolicyValidation(t *testing.T) {
	s := e2etest.StartServer(t)
	ctx := t.Context()
	sb, err := s.Admin.CreateSandbox(ctx, api.CreateSandboxRequest{
		Network: &api.NetworkPolicy{Allow: []string{"web.test", "*.example.org:443", "192.0.2.0/24:5432"}},
		Setup:   &api.Setup{Command: "true", Network: &api.NetworkPolicy{Allow: []string{"pypi.org"}}},
	}, true)
	if err != nil {
		t.Fatal(err)
	}
	v, err := s.Admin.Network(ctx, sb.ID)
	if err != nil || len(v.Policy.Allow) != 3 || len(v.Policy.SetupAllow) != 1 || v.Policy.SetupAllow[0] != "pypi.org" {
		t.Errorf("stored policy: %+v %v", v.Policy, err)
	}
	for _, bad := range []string{`{"network":{"allow":["exa mple.com"]}}`, `{"network":{"allow":["10.0.0.0/33"]}}`, `{"network":{"allow":["host:99999"]}}`} {
		if status, er, body := e2etest.RawRequest(t, "POST", s.URL+"/v1/sandboxes", s.AdminKey, bad); status != 400 || er.Error == nil || er.Error.Code != api.CodeInvalidArgument {
			t.Errorf("%s: %d %s", bad, status, body)
		}
		if status, _, body := e2etest.RawRequest(t, "PATCH", s.URL+"/v1/sandboxes/"+sb.ID, s.AdminKey, bad); status != 400 {
			t.Errorf("PATCH %s: %d %s", bad, status, body)
		}
	}
	if got, _ := s.Admin.Network(ctx, sb.ID); len(got.Policy.Allow) != 3 {
		t.Errorf("a refused PATCH changed the policy: %+v", got.Policy)
	}
	// The CLI shows and replaces the policy.
	out, errs, code := cli(t, s, "", "network", sb.ID, "--allow", "web.test,*.example.org:443")
	if code != 0 || !strings.Contains(out, "allow: web.test, *.example.org:443") || !strings.Contains(out, "DESTINATION") {
		t.Errorf("cove network --allow: %q %q %d", out, errs, code)
	}
	out, errs, code = cli(t, s, "", "network", sb.ID, "--allow", "exa mple.com")
	if code == 0 || !strings.HasPrefix(errs, "cove: ") {
		t.Errorf("cove network with a bad entry: %q %q %d", out, errs, code)
	}
}
