package templates

import (
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
	cove "github.com/cove-dev/cove/sdk/go"
)

func template(t *testing.T, c *cove.Client, name string) api.Template {
	t.Helper()
	ts, err := c.Templates(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, tm := range ts {
		if tm.Name == name {
			return tm
		}
	}
	t.Fatalf("no template %s in %+v", name, ts)
	return api.Template{}
}

// TestManagedBuildsInBackground: with the managed image missing, cove serve
// serves at once and builds it in the background (here with the busybox
// stand-in, held by a file for as long as the test needs): the template is
// building with its progress in GET /v1/templates, /healthz and `cove
// templates`; a create answers 503 with Retry-After and the progress; once
// the hold goes the template is ready, creates work, and its self-test ran
// (busybox has no bash, python3, node, git or curl: ready, not qualified,
// the failures listed).
func TestManagedBuildsInBackground(t *testing.T) {
	images, err := os.MkdirTemp("/var/tmp", "cove-e2e-images-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(images) })
	os.Chmod(images, 0o711)
	hold := filepath.Join(images, ".managed.hold")
	if err := os.WriteFile(hold, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	s := e2etest.StartServer(t, e2etest.WithArgs("--images-dir", images, "--build-managed=true",
		"--managed-builder", "busybox", "--default-template", "managed", "--warm-pool", "1"))

	// The hold is in place, so the build waits: the API serves meanwhile.
	for i := 0; ; i++ {
		if tm := template(t, s.Admin, "managed"); strings.Contains(tm.Progress, "held") {
			if tm.Status != api.TemplateBuilding {
				t.Fatalf("template %+v", tm)
			}
			break
		}
		if i == 600 {
			t.Fatal("the build never reported its hold")
		}
		time.Sleep(100 * time.Millisecond)
	}
	var health struct {
		Templates map[string]string `json:"templates"`
	}
	resp, err := http.Get(s.URL + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	json.NewDecoder(resp.Body).Decode(&health)
	resp.Body.Close()
	if health.Templates["managed"] != api.TemplateBuilding {
		t.Errorf("healthz templates %v", health.Templates)
	}
	cmd := exec.Command(filepath.Join(e2etest.BinDir(), "cove"), "--url", s.URL, "templates")
	cmd.Env = append(os.Environ(), "COVE_API_KEY="+s.AdminKey, "HOME="+t.TempDir())
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "building") || !strings.Contains(string(out), "held") {
		t.Errorf("cove templates: %v\n%s", err, out)
	}

	req, _ := http.NewRequest("POST", s.URL+"/v1/sandboxes", strings.NewReader(`{}`))
	req.Header.Set("Authorization", "Bearer "+s.AdminKey)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var er api.ErrorResponse
	json.NewDecoder(resp.Body).Decode(&er)
	resp.Body.Close()
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "10" || er.Error == nil ||
		er.Error.Code != api.CodeUnavailable || !strings.Contains(er.Error.Message, "held") {
		t.Fatalf("create while building: %d Retry-After %q %+v", resp.StatusCode, resp.Header.Get("Retry-After"), er.Error)
	}

	if err := os.Remove(hold); err != nil {
		t.Fatal(err)
	}
	var tm api.Template
	for i := 0; ; i++ {
		if tm = template(t, s.Admin, "managed"); tm.Status == api.TemplateReady && tm.SelfTest != nil {
			break
		}
		if tm.Status == api.TemplateFailed || i == 1200 {
			t.Fatalf("template %+v", tm)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if tm.Qualified || !slices.Contains(tm.SelfTest.Failures, "python3") || slices.Contains(tm.SelfTest.Failures, "sh") {
		t.Errorf("busybox as managed: qualified %t, failures %v", tm.Qualified, tm.SelfTest.Failures)
	}
	e2etest.Create(t, s.Admin, api.CreateSandboxRequest{})
}

// TestManagedQualified: the cached managed image's self-test found bash,
// python3, node, git and curl working, with their versions.
func TestManagedQualified(t *testing.T) {
	if e2etest.ManagedDir() == "" {
		t.Skip("needs the managed image: set COVE_TEST_IMAGES")
	}
	s := e2etest.StartServer(t, e2etest.WithManaged, e2etest.WithArgs("--warm-pool", "0"))
	tm := template(t, s.Admin, "managed")
	if tm.Status != api.TemplateReady || !tm.Qualified || tm.SelfTest == nil || len(tm.SelfTest.Failures) != 0 {
		t.Fatalf("template %+v", tm)
	}
	versions := map[string]string{}
	for _, r := range tm.SelfTest.Results {
		versions[r.Tool] = r.Version
	}
	for tool, want := range map[string]string{"bash": "GNU bash", "python3": "Python 3", "node": "v", "git": "git version", "curl": "curl "} {
		if !strings.HasPrefix(versions[tool], want) {
			t.Errorf("%s version %q, want %q…", tool, versions[tool], want)
		}
	}
}
