// Stream a command's output as it runs, stop reading halfway (as a cut
// connection or a restarted agent would), and resume from the last
// sequence number seen: no line is lost or repeated. Output itself also
// reconnects on its own after a cut.
//
//	COVE_URL=http://127.0.0.1:7070 COVE_API_KEY=... go run ./examples/go/stream-output
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"strings"

	"github.com/cove-dev/cove/api"
	cove "github.com/cove-dev/cove/sdk/go"
)

var errPause = errors.New("pause")

func main() {
	ctx := context.Background()
	c := cove.NewClient()
	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Labels: map[string]string{"example": "stream-output"}}, true)
	if err != nil {
		log.Fatal(err)
	}
	defer c.TerminateSandbox(context.WithoutCancel(ctx), sb.ID)

	cmd, err := c.Exec(ctx, sb.ID, api.CreateCommandRequest{Command: "for i in 1 2 3 4 5 6; do echo line $i; sleep 0.2; done"})
	if err != nil {
		log.Fatal(err)
	}
	var out strings.Builder
	var last int64
	read := func(rec api.OutputRecord) error {
		last = rec.Seq
		if rec.Type == "exit" {
			fmt.Println("exit code", *rec.ExitCode)
			return nil
		}
		out.Write(rec.Data)
		if strings.Count(out.String(), "\n") == 2 && !strings.Contains(out.String(), "line 3") {
			return errPause // stop after two lines
		}
		return nil
	}
	if err := c.Output(ctx, sb.ID, cmd.ID, 0, true, read); !errors.Is(err, errPause) {
		log.Fatal("first read: ", err)
	}
	fmt.Printf("paused after seq %d\n", last)
	if err := c.Output(ctx, sb.ID, cmd.ID, last, true, read); err != nil {
		log.Fatal("resumed read: ", err)
	}
	fmt.Print(out.String())
	if strings.Count(out.String(), "line ") != 6 {
		log.Fatal("lines lost or repeated")
	}
	fmt.Println("ok")
}
