package inject

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/miekg/dns"

	"github.com/cove-dev/cove/api"

	"github.com/cove-dev/cove/internal/e2e/e2etest"
)

// TestInjectChangedWhileRunning: rules given by a PATCH to a running
// sandbox created without any, a secret created after it started and
// named by a new rule, and a team secret replaced while it runs all take
// effect at the next request, without a wake. A rule or placeholder
// naming a secret the team does not have is refused at once.
func TestInjectChangedWhileRunning(t *testing.T) {
	e2etest.RequireRoot(t)
	if e2etest.ManagedDir() == "" {
		t.Skip("COVE_TEST_IMAGES is not set: this test uses curl of the managed image")
	}
	ctx := t.Context()
	h := startHosts(t)
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, h.CAPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"--ca-certs", caFile, "--warm-pool", "0"}
	for _, n := range []string{"api.inject.test", "other.inject.test"} {
		args = append(args, "--dns-static", n+"="+h.Addr)
	}
	s := e2etest.StartServer(t, e2etest.WithManaged, e2etest.WithArgs(args...))
	e := &env{s: s, h: h, value: randomValue("sk-first-")}
	if _, err := s.Admin.PutSecret(ctx, "openai", e.value); err != nil {
		t.Fatal(err)
	}
	allow := []string{"api.inject.test:443", "other.inject.test:443"}
	e.sb = e2etest.Create(t, s.Admin, api.CreateSandboxRequest{
		Secrets: map[string]api.SecretRef{"OPENAI_API_KEY": {Secret: "openai", Placeholder: true}},
		Network: &api.NetworkPolicy{Allow: allow},
	})
	ph, _ := e.sh(t, `printf %s "$OPENAI_API_KEY"`)
	toAPI := curl + `-H "Authorization: Bearer $OPENAI_API_KEY" https://api.inject.test/`
	last := func(host string) string {
		got := h.got(host)
		if len(got) == 0 {
			return ""
		}
		return got[len(got)-1]
	}
	request := func(t *testing.T, command, host, want string) {
		t.Helper()
		out, code := e.sh(t, command)
		if code != 0 || out != "ok "+host {
			t.Fatalf("exit %d: %q", code, out)
		}
		if got := last(host); got != want {
			t.Fatalf("%s received %q, want %q", host, got, want)
		}
	}
	patch := func(t *testing.T, rules ...api.InjectRule) {
		t.Helper()
		sb, err := s.Admin.UpdateSandbox(ctx, e.sb.ID, api.UpdateSandboxRequest{Network: &api.NetworkPolicy{Allow: allow, Inject: rules}})
		if err != nil {
			t.Fatal(err)
		}
		if sb.State != api.StateRunning {
			t.Fatalf("sandbox %s after the PATCH", sb.State)
		}
	}
	apiRule := api.InjectRule{Host: "api.inject.test", Header: "Authorization", Value: "Bearer {secret:openai}"}
	otherRule := api.InjectRule{Host: "other.inject.test", Header: "Authorization", Value: "token {secret:github}"}

	// Without rules the connection is spliced: the placeholder arrives.
	request(t, toAPI, "api.inject.test", "Bearer "+ph)

	t.Run("unknown secret", func(t *testing.T) {
		_, err := s.Admin.UpdateSandbox(ctx, e.sb.ID, api.UpdateSandboxRequest{Network: &api.NetworkPolicy{Allow: allow, Inject: []api.InjectRule{otherRule}}})
		if api.ErrorCode(err) != api.CodeInvalidArgument || !strings.Contains(err.Error(), `"github"`) || !strings.Contains(err.Error(), "network.inject[0]") {
			t.Fatalf("PATCH naming a missing secret: %v", err)
		}
		_, err = s.Admin.CreateSandbox(ctx, api.CreateSandboxRequest{Network: &api.NetworkPolicy{Allow: allow, Inject: []api.InjectRule{apiRule, otherRule}}}, false)
		if api.ErrorCode(err) != api.CodeInvalidArgument || !strings.Contains(err.Error(), `"github"`) || !strings.Contains(err.Error(), "network.inject[1]") {
			t.Fatalf("create naming a missing secret: %v", err)
		}
		_, err = s.Admin.CreateSandbox(ctx, api.CreateSandboxRequest{Secrets: map[string]api.SecretRef{"TOKEN": {Secret: "github", Placeholder: true}}}, false)
		if api.ErrorCode(err) != api.CodeInvalidArgument || !strings.Contains(err.Error(), `"github"`) || !strings.Contains(err.Error(), "secrets.TOKEN") {
			t.Fatalf("create with a placeholder of a missing secret: %v", err)
		}
		if sb, err := s.Admin.GetSandbox(ctx, e.sb.ID); err != nil || len(sb.Network.Inject) != 0 {
			t.Fatalf("the refused PATCH changed the rules: %+v %v", sb.Network, err)
		}
	})

	t.Run("rules added by a PATCH", func(t *testing.T) {
		patch(t, apiRule)
		request(t, toAPI, "api.inject.test", "Bearer "+e.value)
		// A program that reads the CA variables trusts the gateway too.
		if out, code := e.sh(t, `curl -sS --max-time 10 --cacert "$SSL_CERT_FILE" -H "Authorization: Bearer $OPENAI_API_KEY" https://api.inject.test/`); code != 0 || out != "ok api.inject.test" {
			t.Fatalf("with $SSL_CERT_FILE: exit %d %q", code, out)
		}
	})

	t.Run("secret created after the start", func(t *testing.T) {
		token := randomValue("ghp-")
		if _, err := s.Admin.PutSecret(ctx, "github", token); err != nil {
			t.Fatal(err)
		}
		patch(t, apiRule, otherRule)
		out, code := e.sh(t, curl+"https://other.inject.test/")
		if strings.Contains(out, token) {
			t.Fatal("the sandbox received the value")
		}
		if code != 0 || out != "ok other.inject.test" {
			t.Fatalf("exit %d: %q", code, out)
		}
		if got := last("other.inject.test"); got != "token "+token {
			t.Fatalf("other.inject.test received %q", got)
		}
	})

	t.Run("team secret replaced", func(t *testing.T) {
		old := e.value
		e.value = randomValue("sk-second-")
		if _, err := s.Admin.PutSecret(ctx, "openai", e.value); err != nil {
			t.Fatal(err)
		}
		request(t, toAPI, "api.inject.test", "Bearer "+e.value)
		for _, g := range h.got("other.inject.test") {
			if strings.Contains(g, old) || strings.Contains(g, e.value) {
				t.Fatal("other.inject.test received a value of openai")
			}
		}
	})

	t.Run("team secret deleted", func(t *testing.T) {
		n := len(h.got("other.inject.test"))
		if err := s.Admin.DeleteSecret(ctx, "github"); err != nil {
			t.Fatal(err)
		}
		out, _ := e.sh(t, curl+"-w ' %{http_code}' https://other.inject.test/")
		if !strings.HasSuffix(out, " 502") || !strings.Contains(out, "github") {
			t.Fatalf("after the secret was deleted: %q", out)
		}
		if got := h.got("other.inject.test"); len(got) != n {
			t.Fatalf("other.inject.test received %q", got[n:])
		}
	})
}

// TestInjectDNSChanged: the rule's host resolves (through the node's
// resolver, from an upstream the test runs) to one test host, then to
// another. A kept-alive connection's requests after the change still go
// to the address the sandbox dialled, and a connection to the other
// address under the rule's server name, allowed by a CIDR rule before any
// answer named it, is spliced: the value reaches only the first host.
func TestInjectDNSChanged(t *testing.T) {
	e2etest.RequireRoot(t)
	if e2etest.ManagedDir() == "" {
		t.Skip("COVE_TEST_IMAGES is not set: this test uses curl and python3 of the managed image")
	}
	ctx := t.Context()
	first, second := startHostsOn(t, e2etest.StartTestHost(t)), startHostsOn(t, e2etest.StartTestHost(t))
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, append(append([]byte{}, first.CAPEM...), second.CAPEM...), 0o644); err != nil {
		t.Fatal(err)
	}

	// The upstream resolver: api.inject.test is the first host for the
	// first A query, the second host for every one after.
	var aQueries atomic.Int32
	dnsHost := first.th
	pc := dnsHost.Listen(t, "udp", first.Addr+":53").(net.PacketConn)
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg).SetReply(r)
		if len(r.Question) == 1 && r.Question[0].Qtype == dns.TypeA && strings.EqualFold(r.Question[0].Name, "api.inject.test.") {
			addr := first.Addr
			if aQueries.Add(1) > 1 {
				addr = second.Addr
			}
			m.Answer = append(m.Answer, &dns.A{
				Hdr: dns.RR_Header{Name: r.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 1},
				A:   net.ParseIP(addr),
			})
		}
		w.WriteMsg(m)
	})}
	var wg sync.WaitGroup
	wg.Go(func() { srv.ActivateAndServe() })
	t.Cleanup(func() { srv.Shutdown(); wg.Wait() })

	s := e2etest.StartServer(t, e2etest.WithManaged, e2etest.WithArgs("--ca-certs", caFile, "--warm-pool", "0", "--dns-upstream", first.Addr+":53"))
	e := &env{s: s, h: first, value: randomValue("sk-dns-")}
	if _, err := s.Admin.PutSecret(ctx, "openai", e.value); err != nil {
		t.Fatal(err)
	}
	e.sb = e2etest.Create(t, s.Admin, api.CreateSandboxRequest{
		Secrets: map[string]api.SecretRef{"OPENAI_API_KEY": {Secret: "openai", Placeholder: true}},
		Network: &api.NetworkPolicy{
			// The test hosts' addresses are private: an upstream's answer
			// reaches them only through CIDR rules.
			Allow:  []string{"api.inject.test:443", first.Addr + "/32:443", second.Addr + "/32:443"},
			Inject: []api.InjectRule{{Host: "api.inject.test", Header: "Authorization", Value: "Bearer {secret:openai}"}},
		},
	})
	ph, _ := e.sh(t, `printf %s "$OPENAI_API_KEY"`)
	noValue := func(t *testing.T) {
		t.Helper()
		for _, g := range second.got("api.inject.test") {
			if strings.Contains(g, e.value) {
				t.Fatalf("the second host received the value")
			}
		}
	}

	t.Run("an address no answer gave", func(t *testing.T) {
		// The rule's server name at the second host's address, before any
		// answer named it: spliced, so the sandbox's own TLS reaches the
		// host, with the placeholder alone.
		out, code := e.sh(t, curl+"--resolve api.inject.test:443:"+second.Addr+` -H "Authorization: Bearer $OPENAI_API_KEY" https://api.inject.test/`)
		if code != 0 || out != "ok api.inject.test" {
			t.Fatalf("exit %d: %q", code, out)
		}
		if got := second.got("api.inject.test"); len(got) != 1 || got[0] != "Bearer "+ph {
			t.Fatalf("the second host received %q, want the placeholder", got)
		}
	})

	t.Run("answer changed on a kept-alive connection", func(t *testing.T) {
		script := `import http.client, os, socket
h = {"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"]}
c = http.client.HTTPSConnection("api.inject.test", timeout=10)
def get(path):
    c.request("GET", path, headers=h)
    r = c.getresponse()
    return "%d %s" % (r.status, r.read().decode())
a = get("/first")
now = socket.gethostbyname("api.inject.test")
b = get("/second")
print(a, now, b, sep="|", end="")
`
		out, code := e.sh(t, "python3 -c '"+script+"'")
		if want := "200 ok api.inject.test|" + second.Addr + "|200 ok api.inject.test"; code != 0 || out != want {
			t.Fatalf("exit %d: %q, want %q", code, out, want)
		}
		if got := first.got("api.inject.test"); len(got) != 2 || got[0] != "Bearer "+e.value || got[1] != "Bearer "+e.value {
			t.Fatalf("the first host received %d requests (%d A queries)", len(got), aQueries.Load())
		}
		if got := second.got("api.inject.test"); len(got) != 1 {
			t.Fatalf("the second host received %d requests", len(got))
		}
		noValue(t)
	})
}
