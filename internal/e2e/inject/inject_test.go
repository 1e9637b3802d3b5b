// Package inject tests secrets the sandbox never holds: the node's network
// gateway adds them to the HTTPS requests a policy's injection rules
// name, and the sandbox only ever has a placeholder.
package inject

import (
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	cove "github.com/cove-dev/cove/sdk/go"

	"github.com/cove-dev/cove/internal/e2e/e2etest"
)

func TestMain(m *testing.M) { e2etest.Main(m) }

// hosts is a network namespace of the test's holding one TLS server for
// api.inject.test and other.inject.test (a certificate of the test's CA,
// given to the server as an operator CA) and bad.inject.test (a
// certificate of a CA nobody trusts). It records every request's
// Authorization header by Host.
type hosts struct {
	Addr  string
	CAPEM []byte
	th    *e2etest.TestHost
	mu    sync.Mutex
	seen  map[string][]string // host → Authorization headers, in order
	proto map[string]string   // host → last protocol
}

func (h *hosts) got(host string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.seen[host]...)
}

func (h *hosts) all() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return fmt.Sprint(h.seen)
}

func startHosts(t *testing.T) *hosts {
	t.Helper()
	return startHostsOn(t, e2etest.StartTestHost(t))
}

// startHostsOn serves the TLS test hosts in the namespace th.
func startHostsOn(t *testing.T, th *e2etest.TestHost) *hosts {
	t.Helper()
	h := &hosts{th: th, Addr: th.Addr.String(), seen: map[string][]string{}, proto: map[string]string{}}
	cert, caPEM := e2etest.TestCert(t, "api.inject.test", "other.inject.test")
	h.CAPEM = caPEM
	bad, _ := e2etest.TestCert(t, "bad.inject.test")
	l := th.Listen(t, "tcp", h.Addr+":443").(net.Listener)
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			host, _, err := net.SplitHostPort(r.Host)
			if err != nil {
				host = r.Host
			}
			h.mu.Lock()
			h.seen[host] = append(h.seen[host], r.Header.Get("Authorization"))
			h.proto[host] = r.Proto
			h.mu.Unlock()
			if r.URL.Path == "/redirect" {
				http.Redirect(w, r, "https://other.inject.test/stolen", http.StatusFound)
				return
			}
			// Never the header itself: a host that echoes it hands it to
			// the sandbox (docs/security.md).
			fmt.Fprintf(w, "ok %s", host)
		}),
		TLSConfig: &tls.Config{GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
			if hello.ServerName == "bad.inject.test" {
				return &bad, nil
			}
			return &cert, nil
		}},
		ReadHeaderTimeout: 5 * time.Second,
		ErrorLog:          log.New(io.Discard, "", 0),
	}
	var wg sync.WaitGroup
	wg.Go(func() { srv.ServeTLS(l, "", "") })
	t.Cleanup(func() { srv.Close(); wg.Wait() })
	return h
}

func randomValue(prefix string) string {
	b := make([]byte, 16)
	rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

var rules = []api.InjectRule{
	{Host: "api.inject.test", Header: "Authorization", Value: "Bearer {secret:openai}"},
	{Host: "bad.inject.test", Header: "Authorization", Value: "Bearer {secret:openai}"},
}

type env struct {
	s     *e2etest.Server
	h     *hosts
	sb    api.Sandbox
	value string
}

func setup(t *testing.T) *env {
	t.Helper()
	e2etest.RequireRoot(t)
	if e2etest.ManagedDir() == "" {
		t.Skip("COVE_TEST_IMAGES is not set: this test uses curl, python3 and node of the managed image")
	}
	h := startHosts(t)
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, h.CAPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"--ca-certs", caFile, "--warm-pool", "0"}
	for _, n := range []string{"api.inject.test", "other.inject.test", "bad.inject.test"} {
		args = append(args, "--dns-static", n+"="+h.Addr)
	}
	s := e2etest.StartServer(t, e2etest.WithManaged, e2etest.WithArgs(args...))
	e := &env{s: s, h: h, value: randomValue("sk-live-")}
	if _, err := s.Admin.PutSecret(t.Context(), "openai", e.value); err != nil {
		t.Fatal(err)
	}
	e.sb = e2etest.Create(t, s.Admin, api.CreateSandboxRequest{
		Secrets: map[string]api.SecretRef{"OPENAI_API_KEY": {Secret: "openai", Placeholder: true}},
		Network: &api.NetworkPolicy{
			Allow:  []string{"api.inject.test:443", "other.inject.test:443", "bad.inject.test:443"},
			Inject: rules,
		},
	})
	if _, err := s.Admin.WriteFile(t.Context(), e.sb.ID, "/workspace/ca.pem", strings.NewReader(string(h.CAPEM))); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *env) sh(t *testing.T, command string, opts ...func(*api.CreateCommandRequest)) (string, int) {
	t.Helper()
	res := e2etest.Sh(t, e.s.Admin, e.sb.ID, command, append(opts, e2etest.WithTimeout(30))...)
	out := res.Stdout + res.Stderr
	if strings.Contains(out, e.value) {
		t.Fatalf("%q printed the secret's value", command)
	}
	return out, e2etest.ExitCode(res)
}

const curl = `curl -sS --max-time 10 `

// TestInjectedClients: curl (HTTP/1.1 and HTTP/2), Python's urllib and
// Node's fetch send only the placeholder; the named host receives the
// value. The sandbox holds the placeholder alone, the placeholder sent to
// another allowed host arrives as it is, and the observations and events
// count the requests without the value.
func TestInjectedClients(t *testing.T) {
	e := setup(t)
	ph, _ := e.sh(t, `printf %s "$OPENAI_API_KEY"`)
	if !strings.HasPrefix(ph, "cove_ph_") || len(ph) != len("cove_ph_")+32 {
		t.Fatalf("OPENAI_API_KEY is %q, want a placeholder", ph)
	}
	if sb, _ := e.s.Admin.GetSandbox(t.Context(), e.sb.ID); len(sb.Placeholders) != 1 || sb.Placeholders[0] != "OPENAI_API_KEY" {
		t.Errorf("sandbox placeholders %v", sb.Placeholders)
	}
	want := "Bearer " + e.value
	clients := []struct{ name, command string }{
		{"curl http/1.1", curl + `--http1.1 -H "Authorization: Bearer $OPENAI_API_KEY" https://api.inject.test/`},
		{"curl http/2", curl + `--http2 -H "Authorization: Bearer $OPENAI_API_KEY" https://api.inject.test/`},
		{"python urllib", `python3 -c 'import os, urllib.request as u; r = u.Request("https://api.inject.test/", headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"]}); print(u.urlopen(r, timeout=10).read().decode(), end="")'`},
		{"node fetch", `node -e 'fetch("https://api.inject.test/", {headers: {Authorization: "Bearer " + process.env.OPENAI_API_KEY}}).then(r => r.text()).then(t => process.stdout.write(t)).catch(e => { console.error(e.cause || e); process.exit(1); })'`},
	}
	for i, c := range clients {
		t.Run(c.name, func(t *testing.T) {
			out, code := e.sh(t, c.command)
			if code != 0 || out != "ok api.inject.test" {
				t.Fatalf("exit %d: %q", code, out)
			}
			got := e.h.got("api.inject.test")
			if len(got) != i+1 || got[i] != want {
				t.Fatalf("api.inject.test received %d requests, the last with %q", len(got), got[len(got)-1])
			}
		})
	}

	t.Run("placeholder to another host", func(t *testing.T) {
		out, code := e.sh(t, curl+`-H "Authorization: Bearer $OPENAI_API_KEY" https://other.inject.test/`)
		if code != 0 || out != "ok other.inject.test" {
			t.Fatalf("exit %d: %q", code, out)
		}
		if got := e.h.got("other.inject.test"); len(got) != 1 || got[0] != "Bearer "+ph {
			t.Fatalf("other.inject.test received %q", got)
		}
	})

	t.Run("nothing in the sandbox holds the value", func(t *testing.T) {
		// As sandbox root, one scanner given the value reversed (so that
		// no command line holds it) looks through every other process's
		// environment, command line and readable memory, and the files a
		// process could have been handed it in.
		rev := []rune(e.value)
		slices.Reverse(rev)
		scan := fmt.Sprintf(`import os
v = %q[::-1].encode()
me = str(os.getpid())
hits = []
for pid in filter(str.isdigit, os.listdir("/proc")):
    if pid == me:
        continue
    for f in ("environ", "cmdline"):
        try:
            if v in open(f"/proc/{pid}/{f}", "rb").read():
                hits.append(f"/proc/{pid}/{f}")
        except OSError:
            pass
    try:
        maps = open(f"/proc/{pid}/maps").read().splitlines()
        mem = open(f"/proc/{pid}/mem", "rb", 0)
    except OSError:
        continue
    for line in maps:
        addr, perms = line.split()[:2]
        if "r" not in perms:
            continue
        a, b = (int(x, 16) for x in addr.split("-"))
        try:
            mem.seek(a)
            if v in mem.read(b - a):
                hits.append(f"memory of {pid}")
                break
        except (OSError, ValueError, OverflowError):
            pass
for top in ("/etc", "/workspace", "/tmp", "/home", "/root", "/var/tmp", "/run"):
    for d, _, files in os.walk(top):
        for n in files:
            p = os.path.join(d, n)
            try:
                if os.path.isfile(p) and v in open(p, "rb").read():
                    hits.append(p)
            except OSError:
                pass
print(" ".join(hits), end="")
`, string(rev))
		out, code := e.sh(t, "python3 -c '"+strings.ReplaceAll(scan, "'", `'"'"'`)+"'", e2etest.AsRoot)
		if code != 0 || out != "" {
			t.Fatalf("scan: exit %d, the value is in %q", code, out)
		}
	})

	t.Run("observations and events", func(t *testing.T) {
		v, err := e.s.Admin.Network(t.Context(), e.sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		var o api.NetworkObservation
		for _, x := range v.Observations {
			if x.Destination == "api.inject.test" && x.Port == 443 && x.Decision == "allowed" {
				o = x
			}
		}
		if o.Injected != int64(len(clients)) || o.LastStatus != 200 {
			t.Errorf("observation %+v, want %d injected, last status 200", o, len(clients))
		}
		if len(v.Policy.Inject) != len(rules) || v.Policy.Inject[0].Value != "Bearer {secret:openai}" {
			t.Errorf("policy %+v", v.Policy)
		}
		var evs api.List[api.Event]
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			if evs, err = e.s.Admin.Events(t.Context(), cove.EventQuery{Sandbox: e.sb.ID, Types: []string{"network.injected"}}); err == nil && len(evs.Items) > 0 {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if len(evs.Items) != 1 {
			t.Fatalf("%d network.injected events, want one a minute: %+v", len(evs.Items), evs.Items)
		}
		all := fmt.Sprintf("%+v %+v", evs.Items, v)
		if strings.Contains(all, e.value) {
			t.Fatal("the value is in the observations or events")
		}
	})
}

// TestInjectAttacks: the value reaches no host but the named one, under
// the tricks of a sandbox that holds the placeholder and wants the value.
func TestInjectAttacks(t *testing.T) {
	e := setup(t)
	// CONNECT reaches a static name's private address only through a CIDR
	// rule. A PATCH without inject keeps the rules.
	if _, err := e.s.Admin.UpdateSandbox(t.Context(), e.sb.ID, api.UpdateSandboxRequest{Network: &api.NetworkPolicy{
		Allow: []string{"api.inject.test:443", "other.inject.test:443", "bad.inject.test:443", e.h.Addr + "/32:443"},
	}}); err != nil {
		t.Fatal(err)
	}
	leaked := func(t *testing.T) {
		t.Helper()
		if got := e.h.got("other.inject.test"); len(got) > 0 {
			for _, g := range got {
				if strings.Contains(g, e.value) {
					t.Fatalf("other.inject.test received the value")
				}
			}
		}
		if got := e.h.got("bad.inject.test"); len(got) > 0 {
			t.Fatalf("bad.inject.test received %d requests", len(got))
		}
	}
	auth := `-H "Authorization: Bearer $OPENAI_API_KEY" `
	for _, c := range []struct {
		name, command, want string
	}{
		// Another Host behind the rule's SNI, HTTP/1.1 and HTTP/2
		// (:authority).
		{"other Host, http/1.1", curl + "--http1.1 " + auth + `-H "Host: other.inject.test" https://api.inject.test/`, "is refused"},
		{"other :authority, http/2", curl + "--http2 " + auth + `-H "Host: other.inject.test" https://api.inject.test/`, "is refused"},
		// A kept-alive connection's second request for another host (no
		// new connection: num_connects 0).
		{"kept-alive second request", curl + "--http1.1 -o /dev/null -w '%{http_code} ' https://api.inject.test/first --next -sS --max-time 10 --http1.1 " + auth + `-H "Host: other.inject.test" -w ' %{http_code} %{num_connects}' https://api.inject.test/second`, "is refused\n 403 0"},
		// A redirect from the named host to another: not followed.
		{"redirect", curl + "-o /dev/null -w '%{http_code} %{redirect_url}' " + auth + "https://api.inject.test/redirect", "302 https://other.inject.test/stolen"},
		// CONNECT through the gateway: a tunnel, never terminated.
		{"CONNECT", curl + "-p -x http://other.inject.test:443 " + auth + "https://api.inject.test/", "ok api.inject.test"},
		// An upstream whose certificate does not verify.
		{"upstream certificate", curl + auth + "https://bad.inject.test/", "certificate of bad.inject.test does not verify"},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, code := e.sh(t, c.command)
			if !strings.Contains(out, c.want) {
				t.Fatalf("exit %d: %q, want %q", code, out, c.want)
			}
			leaked(t)
		})
	}
	// Through CONNECT the host got the placeholder, not the value.
	if got := e.h.got("api.inject.test"); !slices.ContainsFunc(got, func(g string) bool { return strings.HasPrefix(g, "Bearer cove_ph_") }) {
		t.Errorf("through CONNECT api.inject.test received %q, want the placeholder", got)
	}
	// A destination without a rule is not decrypted: a client trusting
	// only the test host's own CA verifies it; the rule's host, which the
	// gateway answers with the sandbox's CA, does not.
	if out, code := e.sh(t, curl+"--cacert /workspace/ca.pem https://other.inject.test/"); code != 0 || out != "ok other.inject.test" {
		t.Errorf("other.inject.test with the test CA alone: exit %d %q", code, out)
	}
	if out, code := e.sh(t, curl+"--cacert /workspace/ca.pem https://api.inject.test/"); code == 0 || !strings.Contains(strings.ToLower(out), "certificate") {
		t.Errorf("api.inject.test with the test CA alone: exit %d %q, want a certificate error", code, out)
	}
	t.Log(e.h.all())
}

// TestInjectAcrossWakeAndRestart: the gateway CA's key lives in memory
// only, so a wake and a restart of the server make a new CA, whose
// certificate replaces the old one in the sandbox's bundle (in place for
// a sandbox that kept running); injection goes on, with the same
// placeholder.
func TestInjectAcrossWakeAndRestart(t *testing.T) {
	e := setup(t)
	ctx := t.Context()
	call := curl + `-H "Authorization: Bearer $OPENAI_API_KEY" https://api.inject.test/`
	bundleCA := func() string {
		out, code := e.sh(t, `tail -n 12 /etc/ssl/certs/ca-certificates.crt | sha256sum`)
		if code != 0 {
			t.Fatalf("read the bundle: %q", out)
		}
		return out
	}
	ph, _ := e.sh(t, `printf %s "$OPENAI_API_KEY"`)
	before := bundleCA()
	check := func(when string, n int) {
		t.Helper()
		if out, code := e.sh(t, call); code != 0 || out != "ok api.inject.test" {
			t.Fatalf("%s: exit %d %q", when, code, out)
		}
		if got := e.h.got("api.inject.test"); len(got) != n || got[n-1] != "Bearer "+e.value {
			t.Fatalf("%s: the host received %q", when, got)
		}
		if now, _ := e.sh(t, `printf %s "$OPENAI_API_KEY"`); now != ph {
			t.Fatalf("%s: placeholder %q, was %q", when, now, ph)
		}
	}
	check("at first", 1)

	if _, err := e.s.Admin.SleepSandbox(ctx, e.sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.s.Admin.WaitSandbox(ctx, e.sb.ID, api.StateAsleep, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := e.s.Admin.WakeSandbox(ctx, e.sb.ID); err != nil {
		t.Fatal(err)
	}
	if sb, err := e.s.Admin.WaitSandbox(ctx, e.sb.ID, api.StateRunning, time.Minute); err != nil || sb.State != api.StateRunning {
		t.Fatalf("wake: %v %v", sb.State, err)
	}
	woken := bundleCA()
	if woken == before {
		t.Error("the CA in the bundle is the same after a wake")
	}
	check("after a wake", 2)

	e.s.Stop(syscall.SIGTERM)
	e.s.Start()
	if sb, err := e.s.Admin.WaitSandbox(ctx, e.sb.ID, api.StateRunning, time.Minute); err != nil || sb.State != api.StateRunning {
		t.Fatalf("after a restart: %v %v", sb.State, err)
	}
	if bundleCA() == woken {
		t.Error("the CA in the bundle is the same after a restart")
	}
	check("after a restart", 3)
}
