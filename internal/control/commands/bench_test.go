package commands_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/id"
)

// BenchmarkExecWait measures the commands service's share of a waited
// command under an Idempotency-Key (a first attempt): Exec, then
// WaitCommand, over SQLite and the fake node, whose commands end at once.
// The store writes and reads it makes are most of it.
func BenchmarkExecWait(b *testing.B) {
	e := newEnv(b, nil)
	at := time.Now()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		ctx := id.WithDerivation(b.Context(), id.NewDerivation([]byte(fmt.Sprint(i)), "team_a", "k", at))
		c, err := e.svc.Exec(ctx, "team_a", "sbx_a", true, api.CreateCommandRequest{Command: "true"})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := e.svc.WaitCommand(ctx, "team_a", c.SandboxID, c.ID); err != nil {
			b.Fatal(err)
		}
	}
}
