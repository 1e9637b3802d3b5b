// Package e2e runs `cove serve` as a real process over real runc, overlayfs
// and namespaces, and checks it from outside through the Go SDK and plain
// HTTP, as a user would. The tests need root; they skip otherwise. The
// harness is e2etest, which other root test packages share.
package e2e

import (
	"testing"

	"github.com/cove-dev/cove/internal/e2e/e2etest"
)

func TestMain(m *testing.M) { e2etest.Main(m) }
