// Package webhooks tests, on a real `cove serve`, the delivery of a team's
// events to webhooks (signed as Standard Webhooks sign, checked here by
// code of the test's own, retried, kept across a kill -9) and the
// operators' Prometheus metrics. Receivers listen on loopback only. The
// tests need root; they skip otherwise.
package webhooks

import (
	"testing"

	"github.com/cove-dev/cove/internal/e2e/e2etest"
)

func TestMain(m *testing.M) { e2etest.Main(m) }
