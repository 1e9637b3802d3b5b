package local

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/node"
)

// TestExecPIDInSandbox: the pid Exec answers is the command's own in the
// sandbox's pid namespace: the shell it runs prints the same as $$.
func TestExecPIDInSandbox(t *testing.T) {
	if rootErr != nil {
		t.Skip(rootErr)
	}
	n, ex := testNode(t, "pid", nil, nil)
	ctx := t.Context()
	id := fmt.Sprintf("sbx-pid-%d", time.Now().UnixNano())
	spec := node.SandboxSpec{
		ID: id, Hostname: "pid", Template: "busybox", Pids: 256,
		Resources: api.Resources{CPUs: 1, MemoryMiB: 256, DiskMiB: 64},
	}
	if err := n.Start(ctx, spec); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.DestroyRuntime(context.Background(), id) })
	var pids []int
	for _, cmd := range []string{"cmd_p1", "cmd_p2"} {
		st, err := n.Exec(ctx, id, node.ExecSpec{
			ID: cmd, Template: "busybox", Argv: []string{"/bin/sh", "-c", "echo $$"}, Cwd: "/",
			Env: map[string]string{"PATH": "/bin:/usr/bin:/sbin:/usr/sbin"},
		})
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-ex:
		case <-time.After(30 * time.Second):
			t.Fatalf("command %s did not end", cmd)
		}
		o, err := n.Output(id, cmd)
		if err != nil {
			t.Fatal(err)
		}
		r, size, err := o.Stream("stdout")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(io.NewSectionReader(r, 0, size))
		o.Close()
		got, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || st.PID <= 1 || got != st.PID {
			t.Fatalf("%s: Exec answered pid %d, the shell says $$ is %q", cmd, st.PID, b)
		}
		pids = append(pids, st.PID)
	}
	if pids[0] == pids[1] {
		t.Errorf("two commands, one pid: %v", pids)
	}
}
