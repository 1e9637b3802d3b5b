// Package uidrange holds the root tests of per-sandbox host ID ranges: each
// sandbox's files and processes are host uids of its own, the shared image
// is seen through idmapped mounts and never changes, many sandboxes at once
// do not run into per-user kernel limits, and sandboxes saved by a server
// from before ranges wake with their files' owners.
package uidrange

import (
	"testing"

	"github.com/cove-dev/cove/internal/e2e/e2etest"
)

func TestMain(m *testing.M) { e2etest.Main(m) }
