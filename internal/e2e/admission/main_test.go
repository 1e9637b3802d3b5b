// Package admission holds the root tests of teams' admission flags: what a
// team may use, the guiding refusal, and an admin's grant.
package admission

import (
	"testing"

	"github.com/cove-dev/cove/internal/e2e/e2etest"
)

func TestMain(m *testing.M) { e2etest.Main(m) }
