package sdks

// The SDKs' suites against a fleet: the same tests as TestPythonSDK and
// TestTypeScriptPackage, with COVE_URL naming a `cove control` whose
// sandboxes run on two `cove node` processes of their own.

import (
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/e2e/e2etest"
)

// suiteBound bounds a suite's run through the fleet, well within the
// package's timeout, so that a hang fails with the suite's output and the
// fleet is stopped.
const suiteBound = 6 * time.Minute

func TestPythonSDKThroughFleet(t *testing.T) {
	py := venv(t)
	f := e2etest.StartFleet(t, e2etest.FleetManaged, e2etest.FleetNodes(2), e2etest.FleetLostAfter(20*time.Second))
	pytest(t, suiteBound, py, f.Control.URL, f.Control.AdminKey)
}

func TestTypeScriptSDKThroughFleet(t *testing.T) {
	_, sdk := tsSDK(t)
	f := e2etest.StartFleet(t, e2etest.FleetManaged, e2etest.FleetNodes(2), e2etest.FleetLostAfter(20*time.Second))
	env := []string{"COVE_URL=" + f.Control.URL, "COVE_API_KEY=" + f.Control.AdminKey}
	runFor(t, suiteBound, sdk, env, "npm", "test")
}
