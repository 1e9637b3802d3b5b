package service

import (
	"log/slog"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/lifecycle"
	"github.com/cove-dev/cove/internal/node/nodetest"
	"github.com/cove-dev/cove/internal/store/sqlite"
)

// TestNewPlaneWiresEveryService: NewPlane builds every service, gives the
// core the ones it calls (a sandbox is created and runs, which asks the
// images, templates, teams, meter and vault), and Handler sets every
// service field of the API.
func TestNewPlaneWiresEveryService(t *testing.T) {
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "cove.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	cfg := lifecycle.DefaultConfig()
	cfg.Templates, cfg.WarmPool = []string{"managed"}, 0
	log := slog.New(slog.DiscardHandler)
	p, err := NewPlane(cfg, st, log)
	if err != nil {
		t.Fatal(err)
	}
	nd := nodetest.New()
	nd.OnExit = p.Core.OnExit
	p.SetNode(nd)
	t.Cleanup(nd.Close)
	t.Cleanup(p.Core.Close)

	// A fleet's services are set by `cove control` only; the replica
	// is the process's, set when it serves (planeSide.serve).
	fleetOnly := map[string]bool{"Nodes": true, "JoinTokens": true, "Replica": true}
	pv := reflect.ValueOf(p).Elem()
	for i := range pv.NumField() {
		if pv.Field(i).IsNil() && !fleetOnly[pv.Type().Field(i).Name] {
			t.Errorf("Plane.%s is not built", pv.Type().Field(i).Name)
		}
	}
	hv := reflect.ValueOf(p.Handler(log)).Elem()
	for i := range hv.NumField() {
		f := hv.Type().Field(i)
		if f.IsExported() && f.Type.Kind() == reflect.Interface && hv.Field(i).IsNil() && !fleetOnly[f.Name] {
			t.Errorf("the API's %s is not set", f.Name)
		}
	}

	key, err := p.Teams.Bootstrap(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	admin, err := p.Teams.Authenticate(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := p.Core.CreateSandbox(t.Context(), admin.Team.ID, api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if sb, err = p.Core.WaitSandbox(t.Context(), admin.Team.ID, sb.ID, api.StateRunning, 0); err != nil || sb.State != api.StateRunning {
		t.Fatalf("sandbox %s (%s), %v; want running", sb.State, sb.StateReason, err)
	}
}
