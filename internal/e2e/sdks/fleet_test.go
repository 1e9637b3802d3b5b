package sdks

// The SDKs' suites against a fleet: the same tests as TestPythonSDK and
// TestTypeScriptSDK, with COVE_URL naming a `cove control` whose
// sandboxes run on two `cove node` processes of their own.

import (
	"path/filepath"
	"testing"

	"github.com/cove-dev/cove/internal/e2e/e2etest"
)

func TestPythonSDKThroughFleet(t *testing.T) {
	py := venv(t)
	f := e2etest.StartFleet(t, e2etest.FleetManaged, e2etest.FleetNodes(2))
	env := []string{"COVE_URL=" + f.Control.URL, "COVE_API_KEY=" + f.Control.AdminKey, "PYTHONDONTWRITEBYTECODE=1"}
	run(t, filepath.Join(repoRoot(t), "sdk", "python"), env, py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests")
}

func TestTypeScriptSDKThroughFleet(t *testing.T) {
	_, sdk := tsSDK(t)
	f := e2etest.StartFleet(t, e2etest.FleetManaged, e2etest.FleetNodes(2))
	env := []string{"COVE_URL=" + f.Control.URL, "COVE_API_KEY=" + f.Control.AdminKey}
	run(t, sdk, env, "npm", "test")
}
