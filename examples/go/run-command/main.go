// Run a command in a new sandbox and read its exit code.
//
//	COVE_URL=http://127.0.0.1:7070 COVE_API_KEY=... go run ./examples/go/run-command
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
	c := cove.NewClient() // COVE_URL and COVE_API_KEY
	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Labels: map[string]string{"example": "run-command"}}, true)
	if err != nil {
		log.Fatal(err)
	}
	defer c.TerminateSandbox(context.WithoutCancel(ctx), sb.ID)

	res, err := c.ExecWait(ctx, sb.ID, api.CreateCommandRequest{Command: "echo hello; exit 3"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("stdout %q, exit code %d\n", res.Stdout, *res.Command.ExitCode)
	if *res.Command.ExitCode != 3 {
		log.Fatal("unexpected exit code")
	}
	fmt.Println("ok")
}
