// Upload a local folder into a new sandbox and run its tests. Files the
// folder's .coveignore names (gitignore syntax) stay behind.
//
//	COVE_URL=http://127.0.0.1:7070 COVE_API_KEY=... go run ./examples/go/upload-and-test
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strings"

	"github.com/cove-dev/cove/api"
	cove "github.com/cove-dev/cove/sdk/go"
)

func main() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "project-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	for name, body := range map[string]string{
		"add.sh":      "add() { echo $(($1 + $2)); }\n",
		"test.sh":     ". ./add.sh\n[ \"$(add 2 3)\" = 5 ] && echo PASS || { echo FAIL; exit 1; }\n",
		".coveignore": "build/\n*.log\n",
		"build/big":   "left behind\n",
		"debug.log":   "left behind\n",
	} {
		p := filepath.Join(dir, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			log.Fatal(err)
		}
	}

	c := cove.NewClient()
	req := api.CreateSandboxRequest{Labels: map[string]string{"example": "upload-and-test"}}
	sb, _, err := c.CreateSandboxFromDir(ctx, req, dir, cove.DirSource{})
	if err != nil {
		log.Fatal(err)
	}
	defer c.TerminateSandbox(context.WithoutCancel(ctx), sb.ID)
	if sb, err = c.WaitSandbox(ctx, sb.ID, api.StateRunning, 0); err != nil {
		log.Fatal(err)
	}
	res, err := c.ExecWait(ctx, sb.ID, api.CreateCommandRequest{Command: "ls -A; sh test.sh", Cwd: sb.Workdir})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(res.Stdout)
	if strings.Contains(res.Stdout, "debug.log") || strings.Contains(res.Stdout, "build") {
		log.Fatal(".coveignore was not followed")
	}
	if *res.Command.ExitCode != 0 {
		log.Fatalf("tests failed: exit %d\n%s", *res.Command.ExitCode, res.Stderr)
	}
	fmt.Println("ok")
}
