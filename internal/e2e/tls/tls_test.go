// Package tls proves `cove serve` over TLS end to end, as a user meets it:
// a certificate from a private CA the test makes, served with --tls-cert
// and --tls-key, and every client trusting that CA the way
// docs/operations.md says (the CLI, the Go, Python and TypeScript SDKs,
// the console in headless Chromium), event streams and WebSockets
// included; a certificate renewed on disk is served without a restart.
// Beside it, the console's verified download on a plain-http origin that
// is not loopback, where the browser gives the page no WebCrypto.
package tls

import (
	"bytes"
	"context"
	gotls "crypto/tls"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
	cove "github.com/cove-dev/cove/sdk/go"
)

func TestMain(m *testing.M) { e2etest.Main(m) }

// python is Debian's interpreter, whose httpx and websockets the Python
// SDK runs on.
const python = "/usr/bin/python3"

func repoRoot(t *testing.T) string {
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// tlsServer is a `cove serve` on https with a leaf of ca's.
type tlsServer struct {
	*e2etest.Server
	URL      string // https://127.0.0.1:PORT
	Addr     string // 127.0.0.1:PORT
	CertFile string
	KeyFile  string
	// Admin is a Go SDK client with the admin key that trusts the CA
	// through its http.Client (cove.WithHTTPClient).
	Admin *cove.Client
}

func startTLS(t *testing.T, ca *testCA, dir string, serial int64) *tlsServer {
	t.Helper()
	ts := &tlsServer{CertFile: filepath.Join(dir, "tls.crt"), KeyFile: filepath.Join(dir, "tls.key")}
	c, k := ca.leaf(t, serial)
	install(t, ts.CertFile, ts.KeyFile, c, k)
	ts.Server = e2etest.StartServer(t, e2etest.WithArgs("--tls-cert", ts.CertFile, "--tls-key", ts.KeyFile))
	ts.Addr = ts.Listeners()["api"]
	ts.URL = "https://" + ts.Addr
	ts.Admin = cove.NewClient(cove.WithBaseURL(ts.URL), cove.WithAPIKey(ts.AdminKey), cove.WithHTTPClient(ca.httpClient()))
	// The harness's own cleanup speaks plain HTTP; this one runs first
	// (cleanups run last first) and ends the sandboxes over TLS.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		page, err := ts.Admin.ListSandboxes(ctx, cove.SandboxQuery{Limit: 1000})
		if err != nil {
			t.Errorf("list sandboxes to end them: %v", err)
			return
		}
		for _, sb := range page.Items {
			if sb.State.Terminal() {
				continue
			}
			if _, err := ts.Admin.TerminateSandbox(ctx, sb.ID); err == nil {
				ts.Admin.WaitSandbox(ctx, sb.ID, api.StateTerminated, time.Minute)
			}
		}
	})
	return ts
}

// httpClient trusts the CA alone.
func (ca *testCA) httpClient() *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &gotls.Config{RootCAs: ca.pool, MinVersion: gotls.VersionTLS12}
	return &http.Client{Transport: tr}
}

// servedSerial opens a new TLS connection to addr, verifying the chain
// against the CA, and answers the serial of the certificate served.
func servedSerial(t *testing.T, ca *testCA, addr string) string {
	t.Helper()
	conn, err := gotls.Dial("tcp", addr, &gotls.Config{RootCAs: ca.pool, ServerName: "127.0.0.1"})
	if err != nil {
		t.Fatalf("TLS handshake with %s: %v", addr, err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber.String()
}

// cleanEnv is the test's environment without anything that would choose a
// client's CA or server for it.
func cleanEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		switch strings.SplitN(kv, "=", 2)[0] {
		case "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "CURL_CA_BUNDLE",
			"COVE_URL", "COVE_API_KEY", "COVE_PROFILE", "HOME", "XDG_CONFIG_HOME":
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}

// result is what a program printed and how it ended.
type result struct {
	out, err string
	code     int
}

// runProg runs a program to its end, within d (then its process group is
// killed), in dir.
func runProg(t *testing.T, d time.Duration, dir string, env []string, stdin string, name string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	cmd.Dir, cmd.Env = dir, env
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := result{out: out.String(), err: errb.String()}
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatalf("%s %v: %v\n%s%s", name, args, err, r.out, r.err)
		}
		r.code = ee.ExitCode()
	}
	return r
}

// mustRun is runProg that must exit 0.
func mustRun(t *testing.T, d time.Duration, dir string, env []string, name string, args ...string) string {
	t.Helper()
	r := runProg(t, d, dir, env, "", name, args...)
	if r.code != 0 {
		t.Fatalf("%s %v exited %d:\n%s%s", name, args, r.code, r.out, r.err)
	}
	t.Logf("%s %v:\n%s%s", filepath.Base(name), args, r.out, r.err)
	return r.out
}

// TestTLSEndToEnd: one server on https with a private CA's certificate;
// the CLI, the three SDKs and the console in Chromium each trust that CA
// the documented way, and fail without it; command output streams and
// WebSockets work over TLS; a renewed certificate renamed over the files
// is served on the next connection by the same process.
func TestTLSEndToEnd(t *testing.T) {
	dir := t.TempDir()
	ca := newCA(t, dir, "cove e2e CA "+e2etest.RunID())
	s := startTLS(t, ca, dir, 1001)
	if got := servedSerial(t, ca, s.Addr); got != "1001" {
		t.Fatalf("served serial %s, want 1001", got)
	}
	ctx := context.Background()

	// Without the CA, a client of the system's roots refuses the server.
	if _, err := cove.New(s.URL, s.AdminKey).Health(ctx); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("a client without the CA: %v, want a certificate error", err)
	}

	t.Run("go sdk", func(t *testing.T) { testGo(t, s) })
	t.Run("cli", func(t *testing.T) { testCLI(t, s, ca) })
	t.Run("python sdk", func(t *testing.T) { testPython(t, s, ca) })
	t.Run("typescript sdk", func(t *testing.T) { testTypeScript(t, s, ca) })
	t.Run("console", func(t *testing.T) { testConsoleTLS(t, s, ca) })
	t.Run("renewal on disk", func(t *testing.T) { testRenewal(t, s, ca) })
}

// name is unique to this run.
func name(what string) string {
	return fmt.Sprintf("tls-%s-%s-%d", what, e2etest.RunID(), time.Now().UnixNano()%1000000)
}

func testGo(t *testing.T, s *tlsServer) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sb := e2etest.Create(t, s.Admin, api.CreateSandboxRequest{Name: name("go")})
	if out := e2etest.MustOK(t, s.Admin, sb.ID, "echo go-$((6*7))"); out != "go-42\n" {
		t.Fatalf("exec over https: %q", out)
	}
	// The output stream, followed live.
	cmd, err := s.Admin.Exec(ctx, sb.ID, api.CreateCommandRequest{Command: "for i in 1 2 3; do echo go-line-$i; sleep 0.2; done"})
	if err != nil {
		t.Fatal(err)
	}
	var got strings.Builder
	exited := false
	if err := s.Admin.Output(ctx, sb.ID, cmd.ID, 0, true, func(r api.OutputRecord) error {
		got.Write(r.Data)
		if r.Type == "exit" {
			exited = true
		}
		return nil
	}); err != nil {
		t.Fatalf("follow the output over https: %v", err)
	}
	if got.String() != "go-line-1\ngo-line-2\ngo-line-3\n" || !exited {
		t.Fatalf("the followed output: %q (exit seen %v)", got.String(), exited)
	}
	// A WebSocket (wss://) through the same http.Client: input in, output
	// out.
	cat, err := s.Admin.Exec(ctx, sb.ID, api.CreateCommandRequest{Command: "head -n1", Stdin: true})
	if err != nil {
		t.Fatal(err)
	}
	a, err := s.Admin.Attach(ctx, sb.ID, cat.ID, 0)
	if err != nil {
		t.Fatalf("attach over wss: %v", err)
	}
	defer a.Close()
	if err := a.Write(ctx, []byte("through-wss\n")); err != nil {
		t.Fatal(err)
	}
	var echoed []byte
	for {
		data, done, err := a.Read(ctx)
		if err != nil {
			t.Fatalf("read the attachment: %v (so far %q)", err, echoed)
		}
		echoed = append(echoed, data...)
		if done {
			break
		}
	}
	if string(echoed) != "through-wss\n" {
		t.Fatalf("the attached command echoed %q", echoed)
	}
}

func testCLI(t *testing.T, s *tlsServer, ca *testCA) {
	cove := filepath.Join(e2etest.BinDir(), "cove")
	sb := e2etest.Create(t, s.Admin, api.CreateSandboxRequest{Name: name("cli")})
	home := t.TempDir()
	base := cleanEnv("HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"))
	byEnv := append(base[:len(base):len(base)], "COVE_URL="+s.URL, "COVE_API_KEY="+s.AdminKey)

	// No CA: one readable line, exit 125.
	r := runProg(t, time.Minute, home, byEnv, "", cove, "ls")
	if r.code != 125 || !strings.Contains(r.err, "certificate") || strings.Count(strings.TrimSpace(r.err), "\n") != 0 {
		t.Fatalf("cove ls without the CA: exit %d, stderr %q; want 125 and one line about the certificate", r.code, r.err)
	}
	// SSL_CERT_FILE: Go's roots, for any command.
	if out := mustRun(t, time.Minute, home, append(byEnv, "SSL_CERT_FILE="+ca.File), cove, "ls"); !strings.Contains(out, sb.Name) {
		t.Fatalf("cove ls with SSL_CERT_FILE does not list %s:\n%s", sb.Name, out)
	}
	// `cove login --ca-cert` keeps the CA with the profile: later commands
	// trust it with nothing in the environment.
	r = runProg(t, time.Minute, home, base, s.AdminKey+"\n", cove, "login", s.URL, "--ca-cert", ca.File, "--api-key-stdin")
	if r.code != 0 || !strings.Contains(r.out, "logged in to "+s.URL) {
		t.Fatalf("cove login --ca-cert: exit %d\n%s%s", r.code, r.out, r.err)
	}
	if out := mustRun(t, time.Minute, home, base, cove, "ls"); !strings.Contains(out, sb.Name) {
		t.Fatalf("cove ls after login does not list %s:\n%s", sb.Name, out)
	}
	// cove exec follows the command's output stream over https.
	if out := mustRun(t, 2*time.Minute, home, base, cove, "exec", sb.Name, "--", "sh", "-c", "echo cli-$((6*7)); echo cli-err >&2"); out != "cli-42\n" {
		t.Fatalf("cove exec over https printed %q", out)
	}
}

// pythonScript creates a sandbox, runs a command, follows a command's
// output stream and talks to one over the WebSocket, all over https.
const pythonScript = `
import os, sys
import cove

with cove.Client(os.environ["TLS_URL"], os.environ["TLS_KEY"]) as c:
    with c.create(name=os.environ["TLS_NAME"]) as sb:
        r = sb.run("echo py-$((6*7))")
        assert r.exit_code == 0 and r.stdout == "py-42\n", r
        cmd = sb.start("for i in 1 2 3; do echo py-line-$i; sleep 0.2; done")
        out = b""
        ended = False
        for ch in cmd.output():
            if ch.type == "exit":
                ended = True
                break
            out += ch.data
        assert ended and out == b"py-line-1\npy-line-2\npy-line-3\n", out
        cat = sb.start("head -n1", stdin=True)
        a = cat.attach()
        a.send(b"through-wss\n")
        got = b""
        while True:
            b = a.recv()
            if b is None:
                break
            got += b
        a.close()
        assert got == b"through-wss\n", got
        print("python over https: ok")
`

func testPython(t *testing.T, s *tlsServer, ca *testCA) {
	if _, err := os.Stat(python); err != nil {
		t.Skip("no " + python + " (make test-deps installs it)")
	}
	dir := t.TempDir()
	script := filepath.Join(dir, "tls_check.py")
	if err := os.WriteFile(script, []byte(pythonScript), 0o644); err != nil {
		t.Fatal(err)
	}
	env := cleanEnv("HOME="+dir, "PYTHONDONTWRITEBYTECODE=1", "PYTHONPATH="+filepath.Join(repoRoot(t), "sdk", "python", "src"),
		"TLS_URL="+s.URL, "TLS_KEY="+s.AdminKey, "TLS_NAME="+name("py"))
	r := runProg(t, 2*time.Minute, dir, env, "", python, script)
	if r.code == 0 || !strings.Contains(r.err, "CERTIFICATE_VERIFY_FAILED") {
		t.Fatalf("python without the CA: exit %d\n%s%s", r.code, r.out, r.err)
	}
	if out := mustRun(t, 3*time.Minute, dir, append(env, "SSL_CERT_FILE="+ca.File), python, script); !strings.Contains(out, "python over https: ok") {
		t.Fatalf("python with SSL_CERT_FILE:\n%s", out)
	}
}

// tsScript is the same as pythonScript, with the TypeScript SDK on Node.
const tsScript = `
import { Client } from "./sdk/dist/esm/index.js";
import assert from "node:assert/strict";

const c = new Client({ url: process.env.TLS_URL, apiKey: process.env.TLS_KEY });
const sb = await c.create({ name: process.env.TLS_NAME });
try {
  const r = await sb.run("echo ts-$((6*7))");
  assert.equal(r.exitCode, 0);
  assert.equal(r.stdout, "ts-42\n");
  const cmd = await sb.start("for i in 1 2 3; do echo ts-line-$i; sleep 0.2; done");
  let out = "";
  let ended = false;
  for await (const ch of cmd.output()) {
    if (ch.type === "exit") { ended = true; break; }
    out += new TextDecoder().decode(ch.data);
  }
  assert.ok(ended);
  assert.equal(out, "ts-line-1\nts-line-2\nts-line-3\n");
  const cat = await sb.start("head -n1", { stdin: true });
  const a = await cat.attach();
  a.send("through-wss\n");
  let got = "";
  for await (const b of a) got += new TextDecoder().decode(b);
  assert.equal(got, "through-wss\n");
  console.log("typescript over https: ok");
} finally {
  await sb.terminate();
}
`

func testTypeScript(t *testing.T, s *tlsServer, ca *testCA) {
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skip("no " + tool + " (make test-deps installs it)")
		}
	}
	dir := t.TempDir()
	sdk := filepath.Join(dir, "sdk")
	npm := cleanEnv("HOME="+dir, "npm_config_update_notifier=false", "npm_config_fund=false", "npm_config_audit=false",
		"npm_config_cache="+filepath.Join(os.Getenv("HOME"), ".npm"))
	mustRun(t, time.Minute, dir, npm, "cp", "-r", filepath.Join(repoRoot(t), "sdk", "typescript"), sdk)
	for _, d := range []string{"node_modules", "dist"} {
		os.RemoveAll(filepath.Join(sdk, d))
	}
	// npm ci builds the package (its prepare script), ws included.
	mustRun(t, 10*time.Minute, sdk, npm, "npm", "ci", "--prefer-offline")
	script := filepath.Join(dir, "tls_check.mjs")
	if err := os.WriteFile(script, []byte(tsScript), 0o644); err != nil {
		t.Fatal(err)
	}
	env := cleanEnv("HOME="+dir, "TLS_URL="+s.URL, "TLS_KEY="+s.AdminKey, "TLS_NAME="+name("ts"))
	r := runProg(t, 2*time.Minute, dir, env, "", "node", script)
	// The server sends its leaf alone, which no root of Node's signs.
	if r.code == 0 || !strings.Contains(r.out+r.err, "unable to verify the first certificate") {
		t.Fatalf("node without the CA: exit %d\n%s%s", r.code, r.out, r.err)
	}
	if out := mustRun(t, 3*time.Minute, dir, append(env, "NODE_EXTRA_CA_CERTS="+ca.File), "node", script); !strings.Contains(out, "typescript over https: ok") {
		t.Fatalf("node with NODE_EXTRA_CA_CERTS:\n%s", out)
	}
}

func testRenewal(t *testing.T, s *tlsServer, ca *testCA) {
	pid := s.PID()
	if got := servedSerial(t, ca, s.Addr); got != "1001" {
		t.Fatalf("before the renewal the server serves serial %s, want 1001", got)
	}
	c, k := ca.leaf(t, 2002)
	install(t, s.CertFile, s.KeyFile, c, k)
	if got := servedSerial(t, ca, s.Addr); got != "2002" {
		t.Fatalf("after the renewal a new connection gets serial %s, want 2002", got)
	}
	if s.PID() != pid {
		t.Fatalf("the server restarted (pid %d, was %d)", s.PID(), pid)
	}
	// And the clients go on: a fresh Go SDK client (a new connection) and
	// the CLI.
	fresh := cove.NewClient(cove.WithBaseURL(s.URL), cove.WithAPIKey(s.AdminKey), cove.WithHTTPClient(ca.httpClient()))
	sb := e2etest.Create(t, fresh, api.CreateSandboxRequest{Name: name("renewed")})
	if out := e2etest.MustOK(t, fresh, sb.ID, "echo renewed"); out != "renewed\n" {
		t.Fatalf("exec after the renewal: %q", out)
	}
	home := t.TempDir()
	env := cleanEnv("HOME="+home, "COVE_URL="+s.URL, "COVE_API_KEY="+s.AdminKey, "SSL_CERT_FILE="+ca.File)
	if out := mustRun(t, time.Minute, home, env, filepath.Join(e2etest.BinDir(), "cove"), "ls"); !strings.Contains(out, sb.Name) {
		t.Fatalf("cove ls after the renewal:\n%s", out)
	}
}
