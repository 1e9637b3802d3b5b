package admission

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
)

// TestAdmission: a team of a server started with --default-admission none
// is refused a sandbox of a shipped template and a preview with 403
// permission_denied naming the flag and the exact command an admin runs;
// after `cove teams admit` both work. GET /v1/teams/me shows the flags;
// the admin team has them all; only the admin team may change them.
func TestAdmission(t *testing.T) {
	s := e2etest.StartServer(t, e2etest.WithArgs("--default-admission", "none", "--warm-pool", "0"))
	c := s.NewTeam("acme")
	keys := s.Keys()
	teamKey := keys[len(keys)-1]
	ctx := t.Context()

	me, err := c.Admission(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if me.Team.Name != "acme" || len(me.Admitted) != 0 || me.Admin || me.Limits.MaxResources.CPUs == 0 {
		t.Errorf("teams/me %+v", me)
	}
	adminMe, err := s.Admin.Admission(ctx)
	if err != nil || !adminMe.Admin || len(adminMe.Admitted) != 4 {
		t.Errorf("admin's teams/me %+v %v", adminMe, err)
	}

	_, err = c.CreateSandbox(ctx, api.CreateSandboxRequest{}, true)
	wantDenied(t, err, "managed_environment", "cove teams admit acme --managed-environment")

	cove := func(key string, args ...string) (string, error) {
		cmd := exec.Command(filepath.Join(e2etest.BinDir(), "cove"), append([]string{"--url", s.URL}, args...)...)
		cmd.Env = append(os.Environ(), "COVE_API_KEY="+key, "HOME="+t.TempDir())
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := cove(teamKey, "teams", "admit", "acme", "--managed-environment"); err == nil || !strings.Contains(out, "only the admin team") {
		t.Errorf("a team admitting itself: %v %s", err, out)
	}
	if out, err := cove(s.AdminKey, "teams", "admit", "acme", "--managed-environment"); err != nil || !strings.Contains(out, "managed_environment") {
		t.Fatalf("cove teams admit: %v %s", err, out)
	}
	sb := e2etest.Create(t, c, api.CreateSandboxRequest{})

	_, err = c.CreatePreview(ctx, sb.ID, api.CreatePreviewRequest{Port: 8000})
	wantDenied(t, err, "preview", "cove teams admit acme --preview")
	if out, err := cove(s.AdminKey, "teams", "admit", "acme", "--preview"); err != nil || !strings.Contains(out, "managed_environment, preview") {
		t.Fatalf("cove teams admit --preview: %v %s", err, out)
	}
	if _, err := c.CreatePreview(ctx, sb.ID, api.CreatePreviewRequest{Port: 8000}); err != nil {
		t.Fatalf("preview after admission: %v", err)
	}
	if me, _ = c.Admission(ctx); !slices.Equal(me.Admitted, []string{"managed_environment", "preview"}) {
		t.Errorf("admitted %v", me.Admitted)
	}
	// The admin team keeps every flag.
	if _, err := s.Admin.SetAdmission(ctx, adminMe.Team.ID, api.Admission{}); api.ErrorCode(err) != api.CodeInvalidArgument {
		t.Errorf("taking the admin team's flags: %v", err)
	}
}

// TestDefaultAdmission: without --default-admission a new team may use the
// managed environment and nothing else.
func TestDefaultAdmission(t *testing.T) {
	s := e2etest.StartServer(t, e2etest.WithArgs("--warm-pool", "0"))
	c := s.NewTeam("plain")
	me, err := c.Admission(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(me.Admitted, []string{"managed_environment"}) {
		t.Errorf("admitted %v, want managed_environment", me.Admitted)
	}
	sb := e2etest.Create(t, c, api.CreateSandboxRequest{})
	_, err = c.CreatePreview(t.Context(), sb.ID, api.CreatePreviewRequest{Port: 8000})
	wantDenied(t, err, "preview", "cove teams admit plain --preview")
}

func wantDenied(t *testing.T, err error, flag, command string) {
	t.Helper()
	var e *api.Error
	if !errors.As(err, &e) || e.Code != api.CodePermissionDenied || !strings.Contains(e.Message, command) || !strings.Contains(e.Message, `"`+flag+`"`) {
		t.Fatalf("error %v; want permission_denied naming %q and %q", err, flag, command)
	}
}
