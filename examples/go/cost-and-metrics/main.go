// Read what a sandbox has cost so far and its resource samples.
//
//	COVE_URL=http://127.0.0.1:7070 COVE_API_KEY=... go run ./examples/go/cost-and-metrics
package main

import (
	"context"
	"fmt"
	"log"

	"github.com/cove-dev/cove/api"
	cove "github.com/cove-dev/cove/sdk/go"
)

func main() {
	ctx := context.Background()
	c := cove.NewClient()
	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Labels: map[string]string{"example": "cost-and-metrics"}}, true)
	if err != nil {
		log.Fatal(err)
	}
	defer c.TerminateSandbox(context.WithoutCancel(ctx), sb.ID)
	if _, err := c.ExecWait(ctx, sb.ID, api.CreateCommandRequest{Command: "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done"}); err != nil {
		log.Fatal(err)
	}

	u, err := c.SandboxUsage(ctx, sb.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("cost so far $%.6f (%.1f vCPU-s, %.1f GiB-s)\n", u.CostUSD, u.CPUS, u.MemoryGiBS)
	m, err := c.Metrics(ctx, sb.ID, cove.MetricsQuery{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%d samples every %ds, %d gaps\n", len(m.Samples), m.StepS, len(m.Gaps))
	fmt.Println("ok")
}
