package fleet

import (
	"testing"

	"github.com/cove-dev/cove/internal/testsupport/pgserver"
)

func TestMain(m *testing.M) { pgserver.Main(m) }
