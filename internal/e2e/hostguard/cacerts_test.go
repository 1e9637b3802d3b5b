package hostguard

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
)

// TestOperatorCACerts: a TLS host whose certificate comes from a CA the
// operator trusts (`cove serve --ca-certs`) is trusted by curl, Python's
// urllib and Node.js in a sandbox; without the flag each of them refuses
// the certificate.
func TestOperatorCACerts(t *testing.T) {
	e2etest.RequireRoot(t)
	if e2etest.ManagedDir() == "" {
		t.Skip("COVE_TEST_IMAGES is not set: this test uses curl, python3 and node of the managed image")
	}
	const name = "corp.hostguard.test"
	h := startTLSHost(t, name)
	caFile := filepath.Join(t.TempDir(), "corp-ca.pem")
	if err := os.WriteFile(caFile, h.CAPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	url := "https://" + name + "/"
	nodeGet := `require("https").get("` + url + `", r => { let d = ""; r.on("data", c => d += c); r.on("end", () => process.stdout.write(d)); }).on("error", e => { console.error(e.message); process.exit(1); })`
	clients := []struct{ name, command string }{
		{"curl", "curl -sS --max-time 10 " + url},
		{"python3", `python3 -c 'import urllib.request; print(urllib.request.urlopen("` + url + `", timeout=10).read().decode(), end="")'`},
		{"node", `node -e '` + nodeGet + `'`},
		// Node.js's own CA list, as nodejs.org's builds use by default:
		// it takes the operator's certificates from NODE_EXTRA_CA_CERTS.
		{"node with its bundled CAs", `node --use-bundled-ca -e '` + nodeGet + `'`},
	}
	serve := func(t *testing.T, args ...string) (*e2etest.Server, api.Sandbox) {
		args = append(args, "--dns-static", name+"="+h.Addr, "--warm-pool", "0")
		s := e2etest.StartServer(t, e2etest.WithManaged, e2etest.WithArgs(args...))
		sb := e2etest.Create(t, s.Admin, api.CreateSandboxRequest{Network: &api.NetworkPolicy{Allow: []string{name + ":443"}}})
		return s, sb
	}

	t.Run("trusted with --ca-certs", func(t *testing.T) {
		s, sb := serve(t, "--ca-certs", caFile)
		for _, c := range clients {
			t.Run(c.name, func(t *testing.T) {
				res := e2etest.Sh(t, s.Admin, sb.ID, c.command, e2etest.WithTimeout(30))
				if e2etest.ExitCode(res) != 0 || res.Stdout != "hello from "+name {
					t.Errorf("%s: exit %d, %q %q", c.name, e2etest.ExitCode(res), res.Stdout, res.Stderr)
				}
			})
		}
		// Tools that read a variable first are pointed at the bundle.
		vars := "SSL_CERT_FILE NODE_EXTRA_CA_CERTS REQUESTS_CA_BUNDLE PIP_CERT GIT_SSL_CAINFO"
		got := e2etest.MustOK(t, s.Admin, sb.ID, "for v in "+vars+`; do eval "echo $v=\${$v}"; done`)
		for _, v := range strings.Fields(vars) {
			if want := v + "=/etc/ssl/certs/ca-certificates.crt"; !strings.Contains(got, want+"\n") {
				t.Errorf("environment %q lacks %s", got, want)
			}
		}
		// The bundle is read-only to sandbox root.
		res := e2etest.Sh(t, s.Admin, sb.ID, "echo x >> /etc/ssl/certs/ca-certificates.crt", e2etest.AsRoot)
		if e2etest.ExitCode(res) == 0 {
			t.Error("sandbox root wrote to the CA bundle")
		}
	})
	t.Run("refused without", func(t *testing.T) {
		s, sb := serve(t)
		for _, c := range clients {
			t.Run(c.name, func(t *testing.T) {
				res := e2etest.Sh(t, s.Admin, sb.ID, c.command, e2etest.WithTimeout(30))
				out := res.Stdout + res.Stderr
				if e2etest.ExitCode(res) == 0 || !strings.Contains(strings.ToLower(out), "certificate") {
					t.Errorf("%s: exit %d, %q; want a certificate error", c.name, e2etest.ExitCode(res), out)
				}
			})
		}
	})
}
