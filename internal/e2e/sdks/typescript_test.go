package sdks

// The TypeScript SDK's tests and example against a real `cove serve`: the
// SDK is copied to a temporary folder (so that nothing is written in the
// tree), installed with `npm ci` from its lock file, built with tsc, and
// tested with node's own runner over the compiled output.

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/cove-dev/cove/internal/e2e/e2etest"
)

// tsSDK builds a copy of sdk/typescript under dir/sdk/typescript, beside
// a copy of api/openapi.json at dir/api (where its contract test looks).
func tsSDK(t *testing.T) (dir, sdk string) {
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skip("no " + tool)
		}
	}
	root := repoRoot(t)
	dir = t.TempDir()
	sdk = filepath.Join(dir, "sdk", "typescript")
	if err := os.MkdirAll(filepath.Join(dir, "sdk"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "api"), 0o755); err != nil {
		t.Fatal(err)
	}
	run(t, "", nil, "cp", "-r", filepath.Join(root, "sdk", "typescript"), sdk)
	run(t, "", nil, "cp", filepath.Join(root, "api", "openapi.json"), filepath.Join(dir, "api", "openapi.json"))
	// What a hand build left in the tree is not reused.
	for _, d := range []string{"node_modules", "dist"} {
		os.RemoveAll(filepath.Join(sdk, d))
	}
	npmEnv := []string{"npm_config_update_notifier=false", "npm_config_fund=false", "npm_config_audit=false"}
	run(t, sdk, npmEnv, "npm", "ci")
	run(t, sdk, npmEnv, "npm", "run", "build")
	return dir, sdk
}

func TestTypeScriptSDK(t *testing.T) {
	s := e2etest.StartServer(t, e2etest.WithManaged)
	_, sdk := tsSDK(t)
	env := []string{"COVE_URL=" + s.URL, "COVE_API_KEY=" + s.AdminKey}
	run(t, sdk, env, "npm", "test")
}

// TestTypeScriptExample runs examples/typescript as a user would, with the
// built SDK installed beside it as @cove-dev/sdk.
func TestTypeScriptExample(t *testing.T) {
	s := e2etest.StartServer(t, e2etest.WithManaged)
	dir, sdk := tsSDK(t)
	ex := filepath.Join(dir, "examples", "typescript")
	mods := filepath.Join(ex, "node_modules", "@cove-dev")
	if err := os.MkdirAll(mods, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(sdk, filepath.Join(mods, "sdk")); err != nil {
		t.Fatal(err)
	}
	env := []string{"COVE_URL=" + s.URL, "COVE_API_KEY=" + s.AdminKey}
	for _, example := range []string{"fix-a-test.mjs", "try-fixes-from-asset.mjs"} {
		run(t, "", nil, "cp", filepath.Join(repoRoot(t), "examples", "typescript", example), ex)
		run(t, ex, env, "node", example)
	}
}
