// Command openapi rewrites the components.schemas of api/openapi.json from
// the Go types in api/ (`make openapi`, from the repository's root). The
// rest of the document (paths, parameters, responses) is written by hand
// and kept as it is.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cove-dev/cove/internal/apischema"
)

func main() {
	apiDir := flag.String("api", "api", "the api package's directory; its openapi.json is rewritten")
	flag.Parse()
	if err := run(*apiDir); err != nil {
		fmt.Fprintln(os.Stderr, "openapi:", err)
		os.Exit(1)
	}
}

func run(apiDir string) error {
	path := filepath.Join(apiDir, "openapi.json")
	doc, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	schemas, err := apischema.Generate(apiDir)
	if err != nil {
		return err
	}
	out, err := apischema.Document(doc, schemas)
	if err != nil {
		return err
	}
	return os.WriteFile(path, out, 0o644)
}
