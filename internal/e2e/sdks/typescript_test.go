package sdks

// The TypeScript SDK as a user gets it: the SDK is copied to a temporary
// folder (so that nothing is written in the tree), installed with `npm ci`
// from its lock file (whose prepare script builds the ES module and the
// CommonJS builds), and packed with `npm pack`. The tarball is installed
// into a fresh project that type-checks an `import` and a `require` of it
// and runs the SDK's tests there, against the installed package and a real
// `cove serve`; the examples run the same way.

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cove-dev/cove/internal/e2e/e2etest"
)

var npmEnv = []string{"npm_config_update_notifier=false", "npm_config_fund=false", "npm_config_audit=false"}

// tsPackage builds and packs a copy of sdk/typescript under dir/sdk,
// beside copies of api/openapi.json and sdk/testdata; it answers the
// copy's folder and the tarball's path.
func tsPackage(t *testing.T, dir string) (sdk, tarball string) {
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skip("no " + tool)
		}
	}
	root := repoRoot(t)
	sdk = filepath.Join(dir, "sdk", "typescript")
	for _, d := range []string{"sdk", "api"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	run(t, "", nil, "cp", "-r", filepath.Join(root, "sdk", "typescript"), sdk)
	run(t, "", nil, "cp", "-r", filepath.Join(root, "sdk", "testdata"), filepath.Join(dir, "sdk", "testdata"))
	run(t, "", nil, "cp", filepath.Join(root, "api", "openapi.json"), filepath.Join(dir, "api", "openapi.json"))
	// What a hand build left in the tree is not reused.
	for _, d := range []string{"node_modules", "dist"} {
		os.RemoveAll(filepath.Join(sdk, d))
	}
	run(t, sdk, npmEnv, "npm", "ci")
	for _, f := range []string{"dist/esm/index.js", "dist/esm/index.d.ts", "dist/cjs/index.js", "dist/cjs/index.d.ts"} {
		if _, err := os.Stat(filepath.Join(sdk, f)); err != nil {
			t.Fatalf("npm ci did not build the package (prepare): %v", err)
		}
	}
	run(t, sdk, npmEnv, "npm", "run", "build:test")
	packs := filepath.Join(dir, "packs")
	if err := os.MkdirAll(packs, 0o755); err != nil {
		t.Fatal(err)
	}
	run(t, sdk, npmEnv, "npm", "pack", "--pack-destination", packs)
	found, _ := filepath.Glob(filepath.Join(packs, "cove-dev-sdk-*.tgz"))
	if len(found) != 1 {
		t.Fatalf("npm pack left %v in %s", found, packs)
	}
	return sdk, found[0]
}

// tsSDK is tsPackage in a temporary folder, for a suite that runs in the
// SDK's own folder (where the tests reach the package by its name too).
func tsSDK(t *testing.T) (dir, sdk string) {
	dir = t.TempDir()
	sdk, _ = tsPackage(t, dir)
	return dir, sdk
}

// consumer makes a fresh project at dir that installs the tarball, as a
// user's project would.
func consumer(t *testing.T, dir, tarball string) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	tsWrite(t, filepath.Join(dir, "package.json"), `{"name": "cove-sdk-consumer", "private": true, "type": "module"}`+"\n")
	run(t, dir, npmEnv, "npm", "install", "--prefer-offline", tarball)
}

// TestTypeScriptPackage installs the packed SDK into a fresh project,
// checks that TypeScript finds its types both for an import and for a
// require, and runs the SDK's tests (compiled ES modules, and a CommonJS
// file that requires the package) there against a real server.
func TestTypeScriptPackage(t *testing.T) {
	s := e2etest.StartServer(t, e2etest.WithManaged)
	dir := t.TempDir()
	sdk, tarball := tsPackage(t, dir)
	app := filepath.Join(dir, "consumer")
	consumer(t, app, tarball)

	// Types for both: an ES module that imports, a CommonJS module that
	// requires; tsc resolves each through the package's exports.
	tsWrite(t, filepath.Join(app, "types", "esm.ts"), `import { Client, NotFound, type CommandResult, type SandboxInfo } from "@cove-dev/sdk";
const c: Client = new Client({ apiKey: "k", timeoutMs: 1000 });
const created: SandboxInfo["createdAt"] = "";
const code: CommandResult["exitCode"] = 0;
export const all = [c, created, code, NotFound];
`)
	tsWrite(t, filepath.Join(app, "types", "cjs.cts"), `import cove = require("@cove-dev/sdk");
const c: cove.Client = new cove.Client({ apiKey: "k", maxRetries: 0 });
const created: cove.SandboxInfo["createdAt"] = "";
export = [c, created, cove.Unavailable];
`)
	tsWrite(t, filepath.Join(app, "tsconfig.json"), `{"compilerOptions": {"module": "NodeNext", "moduleResolution": "NodeNext", "target": "ES2022",
  "lib": ["ES2022", "ESNext.Disposable", "DOM"], "types": [], "strict": true, "noEmit": true}, "include": ["types"]}
`)
	run(t, app, nil, filepath.Join(sdk, "node_modules", ".bin", "tsc"), "-p", ".")

	// The tests, with the package they import resolved from the
	// consumer's node_modules, not from the SDK's folder.
	tests := filepath.Join(app, "test")
	if err := os.MkdirAll(tests, 0o755); err != nil {
		t.Fatal(err)
	}
	compiled, _ := filepath.Glob(filepath.Join(sdk, "dist", "test", "*.js"))
	cjs, _ := filepath.Glob(filepath.Join(sdk, "test", "*.test.cjs"))
	for _, f := range append(compiled, cjs...) {
		run(t, "", nil, "cp", f, tests)
	}
	var files []string
	for _, f := range append(compiled, cjs...) {
		if b := filepath.Base(f); strings.Contains(b, ".test.") {
			files = append(files, filepath.Join("test", b))
		}
	}
	if len(files) < 7 {
		t.Fatalf("only %d test files: %v", len(files), files)
	}
	env := []string{
		"COVE_URL=" + s.URL, "COVE_API_KEY=" + s.AdminKey,
		"COVE_OPENAPI=" + filepath.Join(dir, "api", "openapi.json"),
		"COVE_SDK_SRC=" + sdk,
		"COVE_TESTDATA=" + filepath.Join(dir, "sdk", "testdata"),
	}
	run(t, app, env, "node", append([]string{"--test"}, files...)...)
}

// TestTypeScriptExamples runs each program of examples/typescript as a
// user would, in a project with the packed SDK installed.
func TestTypeScriptExamples(t *testing.T) {
	s := e2etest.StartServer(t, e2etest.WithManaged)
	dir := t.TempDir()
	_, tarball := tsPackage(t, dir)
	ex := filepath.Join(dir, "examples")
	consumer(t, ex, tarball)
	examples, _ := filepath.Glob(filepath.Join(repoRoot(t), "examples", "typescript", "*.mjs"))
	if len(examples) < 6 {
		t.Fatalf("only %d examples: %v", len(examples), examples)
	}
	env := []string{"COVE_URL=" + s.URL, "COVE_API_KEY=" + s.AdminKey}
	for _, example := range examples {
		t.Run(filepath.Base(example), func(t *testing.T) {
			run(t, "", nil, "cp", example, ex)
			run(t, ex, env, "node", filepath.Base(example))
		})
	}
}

func tsWrite(t *testing.T, path, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}
