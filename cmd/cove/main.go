// Command cove is the cove CLI and, as `cove serve`, the whole service.
package main

import (
	"context"
	"os"

	"github.com/cove-dev/cove/internal/cli"
)

func main() {
	os.Exit(cli.Main(context.Background(), cli.Env{
		Args:   os.Args[1:],
		Stdin:  os.Stdin,
		Stdout: os.Stdout,
		Stderr: os.Stderr,
		Getenv: os.Getenv,
	}))
}
