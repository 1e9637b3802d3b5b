// Package images holds the root tests of imported images: OCI layout and
// docker-save archives built here from parts (the host's static busybox
// and files the tests write) with go-containerregistry, imported through
// the API and the CLI, and run in real sandboxes: layers, whiteouts and
// opaque directories, images without a shell or with a user of their own,
// refused and hostile archives, admission, defaults, sleep and wake,
// deletion; the network fence, metrics, previews and workloads in them.
package images

import (
	"testing"

	"github.com/cove-dev/cove/internal/e2e/e2etest"
)

func TestMain(m *testing.M) { e2etest.Main(m) }
