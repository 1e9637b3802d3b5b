// Package hostguard tests, on a real `cove serve`, what keeps the host
// safe from its sandboxes and its other users: files and mounts on the
// host, what the server prints and shows, its HTTP bounds, and the CA
// certificates sandboxes trust. The tests need root; they skip otherwise.
package hostguard

import (
	"testing"

	"github.com/cove-dev/cove/internal/e2e/e2etest"
)

func TestMain(m *testing.M) { e2etest.Main(m) }
