package buildcheck

import (
	"context"
	"github.com/cove-dev/cove/internal/service"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cove-dev/cove/internal/control/lifecycle"
	"github.com/cove-dev/cove/internal/node"
	"github.com/cove-dev/cove/internal/node/nodetest"
	"github.com/cove-dev/cove/internal/store/sqlite"
)

// testServer serves the real API and control plane over SQLite and a fake
// node whose shell commands echo their arguments. It returns the URL and
// the admin key.
func testServer(t *testing.T) (url, key string) {
	t.Helper()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "cove.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	cfg := lifecycle.DefaultConfig()
	cfg.Templates = []string{node.ManagedTemplate}
	cfg.WarmPool = 0
	log := slog.New(slog.DiscardHandler)
	plane, err := service.NewPlane(cfg, st, log)
	if err != nil {
		t.Fatal(err)
	}
	nd := nodetest.New()
	nd.OnExit = plane.Core.OnExit
	nd.Run = func(ctx context.Context, spec node.ExecSpec, out *nodetest.Output) node.Exit {
		if rest, ok := strings.CutPrefix(spec.Shell, "echo "); ok {
			out.Write("stdout", []byte(rest+"\n"))
			return node.Exit{}
		}
		return node.Exit{ExitCode: 127}
	}
	plane.SetNode(nd)
	t.Cleanup(nd.Close)
	t.Cleanup(plane.Core.Close)
	if key, err = plane.Teams.Bootstrap(t.Context()); err != nil {
		t.Fatal(err)
	}
	api := plane.Handler(log)
	hs := httptest.NewServer(api)
	t.Cleanup(hs.Close)
	return hs.URL, key
}
