// Package templates holds the root tests of templates' life: the managed
// image built in the background while the API serves, creates refused
// with 503 and Retry-After until it is ready, and self-tests that qualify
// a template or list what it lacks.
package templates

import (
	"testing"

	"github.com/cove-dev/cove/internal/e2e/e2etest"
)

func TestMain(m *testing.M) { e2etest.Main(m) }
