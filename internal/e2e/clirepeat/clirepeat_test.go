// Package clirepeat tests, with the real `cove` binary against a real
// `cove serve` and the admin's CLI config, that a command creating a named
// thing that exists does what the user meant (prints it) or says what is
// there and the next step, instead of only refusing.
package clirepeat

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
	it "github.com/cove-dev/cove/internal/images/imagetest"
)

func TestMain(m *testing.M) { e2etest.Main(m) }

// cli runs the real cove binary against s and returns stdout, stderr and
// the exit code.
func cli(t *testing.T, s *e2etest.Server, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(filepath.Join(e2etest.BinDir(), "cove"), args...)
	cmd.Env = append(os.Environ(), "HOME="+s.Home, "COVE_URL=", "COVE_API_KEY=")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

// want checks a run's exit code and that stdout and stderr hold the given
// substrings.
func want(t *testing.T, what string, out, errs string, code, wantCode int, inOut, inErr []string) {
	t.Helper()
	if code != wantCode {
		t.Errorf("%s: exit %d, want %d (stdout %q, stderr %q)", what, code, wantCode, out, errs)
	}
	for _, s := range inOut {
		if !strings.Contains(out, s) {
			t.Errorf("%s: stdout %q, want it to hold %q", what, out, s)
		}
	}
	for _, s := range inErr {
		if !strings.Contains(errs, s) {
			t.Errorf("%s: stderr %q, want it to hold %q", what, errs, s)
		}
	}
}

func TestCreateWhatExists(t *testing.T) {
	s := e2etest.StartServer(t, e2etest.WithArgs("--webhook-allow-private", "--warm-pool", "0"))
	ctx := t.Context()
	me, err := s.Admin.Admission(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if out, errs, code := cli(t, s, "teams", "admit", me.Team.ID, "--preview", "--custom-images"); code != 0 {
		t.Fatalf("admit: %q %q %d", out, errs, code)
	}
	name := "again-" + e2etest.RunID()

	t.Run("preview", func(t *testing.T) {
		sb := e2etest.Create(t, s.Admin, api.CreateSandboxRequest{})
		first, errs, code := cli(t, s, "preview", sb.ID, "8000")
		if code != 0 || !strings.HasPrefix(first, "http") {
			t.Fatalf("first preview: %q %q %d", first, errs, code)
		}
		ps, err := s.Admin.Previews(ctx, sb.ID)
		if err != nil || len(ps) != 1 {
			t.Fatalf("previews %+v %v", ps, err)
		}
		id := ps[0].ID
		out, errs, code := cli(t, s, "preview", sb.ID, "8000")
		want(t, "the same preview again", out, errs, code, 0, []string{first}, []string{id, "--rm " + id})
		out, errs, code = cli(t, s, "preview", sb.ID, "8000", "--public")
		want(t, "--public on a private preview", out, errs, code, 125, nil,
			[]string{id, "it is private, you asked for public", "cove preview " + sb.ID + " --rm " + id + " && cove preview " + sb.ID + " 8000 --public"})
		if out != "" {
			t.Errorf("--public on a private preview printed %q", out)
		}
		if ps, _ := s.Admin.Previews(ctx, sb.ID); len(ps) != 1 || ps[0].ID != id || ps[0].Visibility != api.VisibilityPrivate {
			t.Errorf("previews after the refused --public: %+v", ps)
		}
	})

	t.Run("sandbox name", func(t *testing.T) {
		out, errs, code := cli(t, s, "create", "--name", name)
		if code != 0 {
			t.Fatalf("first create: %q %q %d", out, errs, code)
		}
		id := strings.TrimSpace(out)
		out, errs, code = cli(t, s, "create", "--name", name)
		want(t, "a second sandbox of one name", out, errs, code, 125, nil,
			[]string{"a sandbox named " + name + " already exists (" + id + ", running)", "cove rm " + name, "another --name"})
	})

	t.Run("team", func(t *testing.T) {
		out, errs, code := cli(t, s, "teams", "create", name)
		if code != 0 {
			t.Fatalf("first team: %q %q %d", out, errs, code)
		}
		teams, err := s.Admin.ListTeams(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var id string
		for _, tm := range teams {
			if tm.Name == name {
				id = tm.ID
			}
		}
		out, errs, code = cli(t, s, "teams", "create", name)
		want(t, "a second team of one name", out, errs, code, 125, nil,
			[]string{"a team named " + name + " already exists (" + id + ")", "cove teams key " + id})
	})

	t.Run("webhook", func(t *testing.T) {
		url := "http://127.0.0.1:9/" + name // loopback, discard port: never delivered (no such event in this test)
		out, errs, code := cli(t, s, "webhooks", "add", url, "--event", "sandbox.expired")
		if code != 0 || !strings.Contains(out, "signing secret") {
			t.Fatalf("first webhook: %q %q %d", out, errs, code)
		}
		id := strings.Fields(out)[1]
		out, errs, code = cli(t, s, "webhooks", "add", url, "--event", "sandbox.expired")
		want(t, "the same webhook again", out, errs, code, 0, []string{id, url}, []string{"exists already", "cove webhooks rm " + id})
		out, errs, code = cli(t, s, "webhooks", "add", url)
		want(t, "the same URL for other events", out, errs, code, 125, nil,
			[]string{id, "sandbox.expired", "you asked for *", "cove webhooks rm " + id + " && cove webhooks add " + url})
		if l, err := s.Admin.ListWebhooks(ctx, 0, ""); err != nil || len(l.Items) != 1 {
			t.Errorf("webhooks after adding one URL thrice: %+v %v, want one", l.Items, err)
		}
	})

	t.Run("image", func(t *testing.T) {
		img := it.Image(t, v1.Config{}, it.Layer(t, it.File("hello", "hi\n", 0o644)))
		path := filepath.Join(t.TempDir(), "image.tar")
		it.OCIArchive(t, img, path, nil)
		out, errs, code := cli(t, s, "images", "import", path, "--name", name)
		if code != 0 {
			t.Fatalf("first import: %q %q %d", out, errs, code)
		}
		got, err := s.Admin.GetImage(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		out, errs, code = cli(t, s, "images", "import", path, "--name", name)
		want(t, "a second image of one name", out, errs, code, 125, nil,
			[]string{"an image called " + name + " already exists (" + got.ID + ")", "cove images update " + name, "cove images rm " + name})
	})
}
