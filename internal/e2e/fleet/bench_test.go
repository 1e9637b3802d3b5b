package fleet

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
	cove "github.com/cove-dev/cove/sdk/go"
)

// BenchmarkFleetVsServe measures, in the same run and alternating, the
// two figures an agent feels through a control plane and a remote node
// and through `cove serve` all in one: create → first command, and the
// command round trip. The ratios are fleet / all-in-one (goal ≤ 1.3).
func BenchmarkFleetVsServe(b *testing.B) {
	s := e2etest.StartServer(b)
	f := e2etest.StartFleet(b, e2etest.FleetNodes(1))
	ctx := context.Background()
	type side struct {
		c            *cove.Client
		sb           string
		create, exec []time.Duration
	}
	sides := []*side{{c: s.Admin}, {c: f.Control.Admin}}
	for _, sd := range sides {
		sd.sb = e2etest.Create(b, sd.c, api.CreateSandboxRequest{}).ID
	}
	roundTrip := func(sd *side) time.Duration {
		start := time.Now()
		res, err := sd.c.ExecWait(ctx, sd.sb, api.CreateCommandRequest{Argv: []string{"true"}})
		if err != nil || e2etest.ExitCode(res) != 0 {
			b.Fatalf("exec: %v %+v", err, res.Command)
		}
		return time.Since(start)
	}
	for b.Loop() {
		for _, sd := range sides {
			start := time.Now()
			sb, err := sd.c.CreateSandbox(ctx, api.CreateSandboxRequest{}, true)
			if err != nil || sb.State != api.StateRunning {
				b.Fatalf("create: %v %s", err, sb.StateReason)
			}
			res, err := sd.c.ExecWait(ctx, sb.ID, api.CreateCommandRequest{Argv: []string{"true"}})
			if err != nil || e2etest.ExitCode(res) != 0 {
				b.Fatalf("exec: %v", err)
			}
			sd.create = append(sd.create, time.Since(start))
			b.StopTimer()
			if _, err := sd.c.TerminateSandbox(ctx, sb.ID); err != nil {
				b.Fatal(err)
			}
			sd.c.WaitSandbox(ctx, sb.ID, api.StateTerminated, time.Minute)
			for range 20 {
				sd.exec = append(sd.exec, roundTrip(sd))
			}
			b.StartTimer()
		}
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	serve, fleet := sides[0], sides[1]
	b.ReportMetric(ms(median(serve.create)), "serve-create-exec-ms")
	b.ReportMetric(ms(median(fleet.create)), "fleet-create-exec-ms")
	b.ReportMetric(float64(median(fleet.create))/float64(median(serve.create)), "create-ratio")
	b.ReportMetric(ms(median(serve.exec)), "serve-exec-ms")
	b.ReportMetric(ms(median(fleet.exec)), "fleet-exec-ms")
	b.ReportMetric(float64(median(fleet.exec))/float64(median(serve.exec)), "exec-ratio")
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
