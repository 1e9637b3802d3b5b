// Package previews holds the root tests of previews: a sandbox's port
// published over HTTP by Host and by path, its tokens, WebSockets through
// it, the fence that keeps every other port closed, wake on request, and
// the throughput of the router against a direct connection.
package previews

import (
	"testing"

	"github.com/cove-dev/cove/internal/e2e/e2etest"
)

func TestMain(m *testing.M) { e2etest.Main(m) }
