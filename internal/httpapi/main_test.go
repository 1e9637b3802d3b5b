package httpapi

import (
	"testing"

	"github.com/cove-dev/cove/internal/testsupport/pgserver"
)

// TestMain stops the PostgreSQL cluster the idempotency tests start.
func TestMain(m *testing.M) { pgserver.Main(m) }
