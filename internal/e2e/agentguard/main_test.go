// Package agentguard tests, on a real `cove serve`, what keeps a sandbox's
// agent (cove-agent, PID 1 in the sandbox) out of reach of what runs in the
// sandbox, and the server safe from an agent that hangs: sandbox root
// cannot trace the agent, read its memory or take its socket; the file
// calls the agent makes for the API cannot be led by a user's symlinks;
// and a hung agent neither stops `cove serve` from starting nor holds up
// other sandboxes. The tests need root; they skip otherwise.
package agentguard

import (
	"testing"

	"github.com/cove-dev/cove/internal/e2e/e2etest"
)

func TestMain(m *testing.M) { e2etest.Main(m) }
