// Give a sandbox a network allow list, change it while it runs, and read
// back what it allows and what it tried.
//
//	COVE_URL=http://127.0.0.1:7070 COVE_API_KEY=... go run ./examples/go/allow-list
package main

import (
	"context"
	"fmt"
	"log"
	"slices"

	"github.com/cove-dev/cove/api"
	cove "github.com/cove-dev/cove/sdk/go"
)

func main() {
	ctx := context.Background()
	c := cove.NewClient()
	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{
		Labels:  map[string]string{"example": "allow-list"},
		Network: &api.NetworkPolicy{Allow: []string{"example.com"}},
	}, true)
	if err != nil {
		log.Fatal(err)
	}
	defer c.TerminateSandbox(context.WithoutCancel(ctx), sb.ID)

	// Widen the list while the sandbox runs; it applies at once.
	if _, err := c.UpdateSandbox(ctx, sb.ID, api.UpdateSandboxRequest{
		Network: &api.NetworkPolicy{Allow: []string{"example.com", "*.example.org"}},
	}); err != nil {
		log.Fatal(err)
	}
	view, err := c.Network(ctx, sb.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("allowed:", view.Policy.Allow)
	for _, o := range view.Observations {
		fmt.Println("tried:", o.Destination, o.Port, o.Decision)
	}
	if !slices.Contains(view.Policy.Allow, "*.example.org") {
		log.Fatal("the new allow list did not apply")
	}
	fmt.Println("ok")
}
