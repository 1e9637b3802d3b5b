package buildcheck

import (
	"strings"
	"testing"
)

// TestArchiveLayer: the archive package, shared by the CLI and the node,
// links nothing of cove's (so the CLI off Linux and the node take it
// alike), and the node packs its archives with it, not with the public
// Go SDK's copy.
func TestArchiveLayer(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	dir := root(t)
	for _, p := range deps(t, dir, "./internal/archive") {
		if strings.HasPrefix(p, mod+"/") && p != mod+"/internal/archive" {
			t.Errorf("./internal/archive links %s", p)
		}
	}
	for _, p := range deps(t, dir, "./internal/node/local") {
		if strings.HasPrefix(p, mod+"/sdk/") {
			t.Errorf("./internal/node/local links %s", p)
		}
	}
}
