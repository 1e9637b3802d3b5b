// Put a named sandbox to sleep, then, as a later process would, find it by
// name, wake it and find its files as they were.
//
//	COVE_URL=http://127.0.0.1:7070 COVE_API_KEY=... go run ./examples/go/sleep-and-reconnect
package main

import (
	"context"
	"fmt"
	"log"
	"strings"
	"time"

	"github.com/cove-dev/cove/api"
	cove "github.com/cove-dev/cove/sdk/go"
)

func main() {
	ctx := context.Background()
	c := cove.NewClient()
	name := fmt.Sprintf("notebook-%d", time.Now().UnixNano()%1_000_000)
	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Name: name, Labels: map[string]string{"example": "sleep-and-reconnect"}}, true)
	if err != nil {
		log.Fatal(err)
	}
	defer c.TerminateSandbox(context.WithoutCancel(ctx), sb.ID)
	if _, err := c.WriteFile(ctx, name, sb.Workdir+"/state.txt", strings.NewReader("step 41\n")); err != nil {
		log.Fatal(err)
	}
	if _, err := c.SleepSandbox(ctx, name); err != nil {
		log.Fatal(err)
	}
	if sb, err = c.WaitSandbox(ctx, name, api.StateAsleep, 2*time.Minute); err != nil || sb.State != api.StateAsleep {
		log.Fatalf("sleep: %v (state %s)", err, sb.State)
	}
	fmt.Println(name, "is", sb.State)

	// Later, anywhere: a new client finds the sandbox by its name.
	later := cove.NewClient()
	if _, err := later.WakeSandbox(ctx, name); err != nil {
		log.Fatal(err)
	}
	if sb, err = later.WaitSandbox(ctx, name, api.StateRunning, 2*time.Minute); err != nil || sb.State != api.StateRunning {
		log.Fatalf("wake: %v (state %s)", err, sb.State)
	}
	res, err := later.ExecWait(ctx, name, api.CreateCommandRequest{Command: "cat state.txt", Cwd: sb.Workdir})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(name, " is ", sb.State, ", state.txt: ", res.Stdout)
	if res.Stdout != "step 41\n" {
		log.Fatal("the file did not survive the sleep")
	}
	fmt.Println("ok")
}
