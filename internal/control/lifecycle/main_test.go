package lifecycle_test

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestMain fails the package when a goroutine of the control plane (or an
// open database's) outlives the tests: every goroutine has an owner that
// waits for it, and Close is that wait.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if leaked := leakedGoroutines(); leaked != "" {
			fmt.Fprintf(os.Stderr, "goroutines left after the tests:\n%s\n", leaked)
			code = 1
		}
	}
	os.Exit(code)
}

// leakedGoroutines returns the stacks of goroutines running cove's code
// or an open database's, after giving those that are ending a moment.
func leakedGoroutines() string {
	var leaked []string
	for range 50 {
		leaked = leaked[:0]
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		for _, g := range strings.Split(string(buf), "\n\n") {
			if strings.Contains(g, "leakedGoroutines") {
				continue // this one
			}
			if strings.Contains(g, "github.com/cove-dev/cove/internal/") || strings.Contains(g, "database/sql.(*DB).connectionOpener") {
				leaked = append(leaked, g)
			}
		}
		if len(leaked) == 0 {
			return ""
		}
		time.Sleep(20 * time.Millisecond)
	}
	return strings.Join(leaked, "\n\n")
}
