// Command modproxy writes the tree's published Go modules (api, sdk/go)
// as a file:// module proxy; `make dist` runs it.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/cove-dev/cove/internal/modproxy"
)

func main() {
	out := flag.String("out", "dist/goproxy", "directory to write the proxy to")
	tree := flag.String("tree", ".", "the repository's top directory")
	version := flag.String("version", "", "version to publish (default: the api version sdk/go/go.mod requires)")
	flag.Parse()
	if *version == "" {
		v, err := modproxy.Version(*tree)
		if err != nil {
			fmt.Fprintln(os.Stderr, "modproxy:", err)
			os.Exit(1)
		}
		*version = v
	}
	if err := modproxy.Write(*out, *tree, *version, time.Now()); err != nil {
		fmt.Fprintln(os.Stderr, "modproxy:", err)
		os.Exit(1)
	}
	abs, _ := filepath.Abs(*out)
	fmt.Printf("wrote %s at %s to %s (GOPROXY=file://%s)\n", modproxy.Published, *version, *out, abs)
}
