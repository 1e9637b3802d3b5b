// Package buildcheck tests the module's build boundaries: which packages
// may link which, that the CLI builds off Linux, and that the Go SDK is a
// module others can import on its own. It has tests only.
package buildcheck

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/modproxy"
)

const mod = "github.com/cove-dev/cove"

// root is the repository's root: two levels above this package.
func root(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

func goBin() string {
	if p := filepath.Join(runtime.GOROOT(), "bin", "go"); fileExists(p) {
		return p
	}
	return "go"
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// list lists the packages pattern names, in dir.
func list(t *testing.T, dir, pattern string) []string {
	t.Helper()
	cmd := exec.Command(goBin(), "list", pattern)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list %s: %v\n%s", pattern, err, out)
	}
	return strings.Fields(string(out))
}

// deps lists the packages pkg links, in dir, with extra environment.
func deps(t *testing.T, dir, pkg string, env ...string) []string {
	t.Helper()
	cmd := exec.Command(goBin(), "list", "-deps", pkg)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
	}
	return strings.Fields(string(out))
}

// TestLayers holds the seams: the control plane speaks to a node through
// the node's contract only; the SDK and the CLI's client commands link no
// server code; the CLI and the agent do not link each other's side of the
// agent protocol.
func TestLayers(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	dir := root(t)
	serverOnly := []string{
		"modernc.org/sqlite", "github.com/vishvananda/netlink", "github.com/google/nftables",
		"github.com/creack/pty", mod + "/internal/",
	}
	// A feature room of the control plane sees the core, the API and the
	// node only through the interfaces it declares.
	featureForbidden := []string{
		mod + "/internal/control/lifecycle", mod + "/internal/httpapi", mod + "/internal/service",
		mod + "/internal/store/sqlite", mod + "/internal/store/postgres",
		mod + "/internal/agent/", mod + "/internal/node/runtime", mod + "/internal/node/output",
		mod + "/internal/node/local", mod + "/internal/node/image", mod + "/internal/node/saves",
	}
	tests := []struct {
		name      string
		dir, pkg  string
		env       []string
		forbidden []string
	}{
		{"control plane core", dir, "./internal/control/lifecycle", nil, []string{
			mod + "/internal/httpapi", mod + "/internal/service", mod + "/internal/store/sqlite",
			mod + "/internal/store/postgres",
			mod + "/internal/agent/", mod + "/internal/node/runtime", mod + "/internal/node/output",
			mod + "/internal/node/local", mod + "/internal/node/image", mod + "/internal/node/saves",
			mod + "/cmd/cove-agent/",
		}},
		{"API", dir, "./internal/httpapi", nil, []string{
			mod + "/internal/agent/", mod + "/internal/node/runtime", mod + "/internal/node/output",
			mod + "/internal/node/local",
		}},
		{"SDK", filepath.Join(dir, "sdk", "go"), ".", nil, serverOnly},
		{"CLI off Linux", dir, "./cmd/cove", []string{"GOOS=darwin", "GOARCH=arm64", "CGO_ENABLED=0"}, []string{
			"modernc.org/sqlite", "github.com/vishvananda/netlink", "github.com/google/nftables", "github.com/creack/pty",
			mod + "/internal/service", mod + "/internal/store", mod + "/internal/control/", mod + "/internal/node/",
			mod + "/internal/agent/", mod + "/cmd/cove-agent/",
		}},
		{"CLI", dir, "./cmd/cove", nil, []string{mod + "/cmd/cove-agent/"}},
		{"agent", dir, "./cmd/cove-agent", nil, []string{
			mod + "/internal/agent/client", "modernc.org/sqlite", "github.com/vishvananda/netlink",
			mod + "/internal/control/", mod + "/internal/store",
		}},
		{"agent wire", dir, "./internal/agent/wire", nil, []string{mod + "/", "github.com/", "golang.org/x/"}},
	}
	// Every other room of the control plane (internal/control/…: the
	// features, runs, page) imports neither the core nor the API nor the
	// node's implementation nor a store's, and so does the webhooks'
	// service: each reaches them through the interfaces it declares.
	rooms := append(list(t, dir, "./internal/control/..."), mod+"/internal/webhooks")
	for _, room := range rooms {
		if room == mod+"/internal/control/lifecycle" {
			continue
		}
		tests = append(tests, struct {
			name      string
			dir, pkg  string
			env       []string
			forbidden []string
		}{"room " + strings.TrimPrefix(room, mod+"/internal/"), dir, room, nil, featureForbidden})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, p := range deps(t, tt.dir, tt.pkg, tt.env...) {
				for _, f := range tt.forbidden {
					if p == strings.TrimSuffix(f, "/") || strings.HasPrefix(p, f) {
						if tt.name == "agent wire" && p == mod+"/internal/agent/wire" {
							continue // itself
						}
						t.Errorf("%s links %s", tt.pkg, p)
					}
				}
			}
		})
	}
}

// TestSDKIsItsOwnModule fetches the SDK as a user does: it writes the
// tree's published modules (api, sdk/go) as a file:// module proxy at the
// version `make dist` gives them, has a program outside this repository
// `go get` the SDK through it (no replace, no workspace), builds it and
// runs it against a test server: it creates a sandbox and runs a command.
func TestSDKIsItsOwnModule(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program")
	}
	dir := root(t)
	version, err := modproxy.Version(dir)
	if err != nil {
		t.Fatal(err)
	}
	proxy := t.TempDir()
	if err := modproxy.Write(proxy, dir, version, time.Now()); err != nil {
		t.Fatal(err)
	}
	prog := t.TempDir()
	gomod := "module example.com/agent\n\ngo 1.24\n"
	main := `package main

import (
	"context"
	"fmt"
	"os"

	"github.com/cove-dev/cove/api"
	cove "github.com/cove-dev/cove/sdk/go"
)

func main() {
	ctx := context.Background()
	c := cove.NewClient()
	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Name: "from-outside"}, true)
	if err != nil {
		fmt.Fprintln(os.Stderr, "create:", err)
		os.Exit(1)
	}
	res, err := c.ExecWait(ctx, sb.ID, api.CreateCommandRequest{Command: "echo 42"})
	if err != nil {
		fmt.Fprintln(os.Stderr, "exec:", err)
		os.Exit(1)
	}
	fmt.Printf("%s %s %s", sb.State, res.Command.State, res.Stdout)
}
`
	for name, body := range map[string]string{"go.mod": gomod, "main.go": main} {
		if err := os.WriteFile(filepath.Join(prog, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The SDK's own dependencies come from this machine's module cache,
	// which is laid out as a proxy too; a fresh cache of the program's own
	// proves the SDK is read from the proxy just written.
	cache := goEnv(t, "GOMODCACHE")
	// On a fresh machine that cache holds only what the tree's own builds
	// needed: download every module the published modules build with
	// first (through the usual proxy; the tree's own from the one just
	// written), so the file:// one holds them.
	// Each runs on a copy of the module's go.mod and go.sum, so the tree
	// is left as it was.
	for _, m := range []string{"api", "sdk/go"} {
		scratch := t.TempDir()
		for _, f := range []string{"go.mod", "go.sum"} {
			b, err := os.ReadFile(filepath.Join(dir, m, f))
			if errors.Is(err, fs.ErrNotExist) && f == "go.sum" {
				continue // a module with no dependencies has none
			}
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(scratch, f), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		dl := exec.Command(goBin(), "mod", "download")
		dl.Dir = scratch
		dl.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod",
			"GOPROXY=file://"+proxy+","+goEnv(t, "GOPROXY"), "GONOSUMDB="+modproxy.Root)
		if out, err := dl.CombinedOutput(); err != nil {
			t.Fatalf("go mod download in %s: %v\n%s", m, err, out)
		}
	}
	env := append(os.Environ(), "GOWORK=off", "CGO_ENABLED=0",
		"GOFLAGS=-mod=mod -modcacherw",
		"GOPROXY=file://"+proxy+",file://"+filepath.Join(cache, "cache", "download"),
		"GOMODCACHE="+filepath.Join(prog, ".modcache"),
		"GONOSUMDB="+modproxy.Root, "GONOSUMCHECK=1", "GOSUMDB=off")
	get := exec.Command(goBin(), "get", modproxy.Root+"/sdk/go@"+version)
	get.Dir = prog
	get.Env = env
	if out, err := get.CombinedOutput(); err != nil {
		t.Fatalf("go get the SDK through the proxy: %v\n%s", err, out)
	}
	gotMod, err := os.ReadFile(filepath.Join(prog, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{modproxy.Root + "/sdk/go " + version, modproxy.Root + "/api " + version} {
		if !strings.Contains(string(gotMod), want) {
			t.Errorf("go.mod after go get lacks %q:\n%s", want, gotMod)
		}
	}
	if strings.Contains(string(gotMod), "replace") {
		t.Errorf("go.mod after go get has a replace:\n%s", gotMod)
	}
	build := exec.Command(goBin(), "build", "-o", "agent", ".")
	build.Dir = prog
	build.Env = env
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build against the SDK module: %v\n%s", err, out)
	}
	// The program links no server code.
	list := exec.Command(goBin(), "list", "-deps", ".")
	list.Dir = prog
	list.Env = build.Env
	out, err := list.CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, p := range strings.Fields(string(out)) {
		if strings.HasPrefix(p, mod+"/internal") || strings.HasPrefix(p, "modernc.org/") {
			t.Errorf("the SDK program links %s", p)
		}
	}

	url, key := testServer(t)
	run := exec.Command(filepath.Join(prog, "agent"))
	run.Env = append(os.Environ(), "COVE_URL="+url, "COVE_API_KEY="+key)
	got, err := run.CombinedOutput()
	if err != nil {
		t.Fatalf("run: %v\n%s", err, got)
	}
	if want := "running exited 42\n"; string(got) != want {
		t.Fatalf("program printed %q, want %q", got, want)
	}
}

// goEnv is `go env name`.
func goEnv(t *testing.T, name string) string {
	t.Helper()
	out, err := exec.Command(goBin(), "env", name).Output()
	if err != nil {
		t.Fatalf("go env %s: %v", name, err)
	}
	return strings.TrimSpace(string(out))
}
