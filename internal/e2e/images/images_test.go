package images

import (
	"archive/tar"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
	it "github.com/cove-dev/cove/internal/images/imagetest"
	"github.com/cove-dev/cove/internal/node/image"
	cove "github.com/cove-dev/cove/sdk/go"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// server is a cove serve with an images dir of its own (the busybox
// default template built into it), so that a test sees exactly what its
// imports store.
type server struct {
	*e2etest.Server
	imagesDir string
}

func startServer(t *testing.T) server {
	t.Helper()
	e2etest.RequireRoot(t)
	dir, err := os.MkdirTemp("/var/tmp", "cove-e2e-images-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o711)
	t.Cleanup(func() { os.RemoveAll(dir) })
	if _, err := image.BuildBusybox(t.Context(), dir, "busybox"); err != nil {
		t.Fatal(err)
	}
	s := e2etest.StartServer(t, e2etest.WithArgs("--images-dir", dir, "--warm-pool", "0"))
	return server{s, dir}
}

// team is a new team with admission a.
func (s server) team(t *testing.T, name string, a api.Admission) (*cove.Client, string) {
	t.Helper()
	c := s.NewTeam(name + "-" + e2etest.RunID())
	me, err := c.Admission(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Admin.SetAdmission(t.Context(), me.Team.ID, a); err != nil {
		t.Fatal(err)
	}
	return c, me.Team.ID
}

var imagesAdmission = api.Admission{ManagedEnvironment: true, CustomImages: true}

// stored lists the entries of the images dir's v2 (what imports store).
func (s server) stored(t *testing.T) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(s.imagesDir, "v2"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

func importFile(t *testing.T, c *cove.Client, name, path string, st *api.ImageSettings) (api.Image, error) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return c.ImportImage(t.Context(), name, st, f)
}

func mustImport(t *testing.T, c *cove.Client, name, path string, st *api.ImageSettings) api.Image {
	t.Helper()
	img, err := importFile(t, c, name, path, st)
	if err != nil {
		t.Fatalf("import %s: %v", name, err)
	}
	return img
}

func wantCode(t *testing.T, err error, code api.Code, says string) {
	t.Helper()
	var e *api.Error
	if !errors.As(err, &e) || e.Code != code || !strings.Contains(e.Message, says) {
		t.Fatalf("error %v; want %s saying %q", err, code, says)
	}
}

func archive(t *testing.T, img v1.Image, oci bool) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "image.tar")
	if oci {
		it.OCIArchive(t, img, path, nil)
	} else {
		it.DockerArchive(t, img, path)
	}
	return path
}

func argv(t *testing.T, c *cove.Client, ref string, args ...string) api.CommandResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	res, err := c.ExecWait(ctx, ref, api.CreateCommandRequest{Argv: args})
	if err != nil {
		t.Fatalf("exec %v: %v", args, err)
	}
	return res
}

// TestImportedImagesRun: images built here import (an OCI layout and a
// docker-save archive, the latter through the CLI) and run under
// cove-agent: lower layers' files deleted by a whiteout are gone, an
// opaque directory holds only its upper layer's files; an image without a
// shell runs argv and refuses a command string clearly; an image whose
// User is 1234 runs commands as 1234 with its Env, in its WorkingDir.
// The same image imported twice is stored once.
func TestImportedImagesRun(t *testing.T) {
	s := startServer(t)
	c, _ := s.team(t, "run", imagesAdmission)
	before := s.stored(t)

	t.Run("layers", func(t *testing.T) {
		img := it.Image(t, v1.Config{Env: []string{"PATH=/bin"}},
			it.Busybox(t, false, "", ""),
			it.Layer(t, it.Dir("data", 0o755), it.File("data/gone", "x", 0o644), it.File("data/kept", "kept\n", 0o644),
				it.Dir("opq", 0o755), it.File("opq/lower", "l", 0o644), it.Dir("opq/sub", 0o755), it.File("opq/sub/deep", "d", 0o644)),
			it.Layer(t, it.Whiteout("data/gone"), it.Opaque("opq"), it.File("opq/upper", "u", 0o644)),
		)
		got := mustImport(t, c, "layers-"+e2etest.RunID(), archive(t, img, true), nil)
		if want := []string{"/bin/sh", "-c"}; !slices.Equal(got.Config.Shell, want) {
			t.Errorf("shell %v; want %v", got.Config.Shell, want)
		}
		sb := e2etest.Create(t, c, api.CreateSandboxRequest{Template: got.Name})
		out := e2etest.MustOK(t, c, sb.ID, "test ! -e /data/gone && cat /data/kept && ls -A /opq")
		if out != "kept\nupper\n" {
			t.Errorf("after whiteout and opaque dir: %q; want kept, then only upper in /opq", out)
		}
	})

	t.Run("no shell", func(t *testing.T) {
		img := it.Image(t, v1.Config{}, it.Busybox(t, true, "", ""))
		got := mustImport(t, c, "noshell-"+e2etest.RunID(), archive(t, img, false), nil)
		if len(got.Config.Shell) != 0 {
			t.Errorf("shell %v; want none", got.Config.Shell)
		}
		sb := e2etest.Create(t, c, api.CreateSandboxRequest{Template: got.Name})
		res := argv(t, c, sb.ID, "/bin/busybox", "echo", "argv works")
		if res.Stdout != "argv works\n" || e2etest.ExitCode(res) != 0 {
			t.Errorf("argv: %q exit %d stderr %q", res.Stdout, e2etest.ExitCode(res), res.Stderr)
		}
		_, err := c.Exec(t.Context(), sb.ID, api.CreateCommandRequest{Command: "echo hi"})
		wantCode(t, err, api.CodeInvalidArgument, "has no shell")
		// A workload of the image is refused at submit, not queued to fail.
		_, err = c.SubmitWorkload(t.Context(), api.CreateWorkloadRequest{Image: got.Name, Command: "echo hi"})
		wantCode(t, err, api.CodeInvalidArgument, "has no shell")
	})

	t.Run("user and env", func(t *testing.T) {
		img := it.Image(t, v1.Config{User: "1234", Env: []string{"PATH=/bin", "GREETING=hello from the image"}, WorkingDir: "/srv/app",
			Entrypoint: []string{"/bin/false"}, Cmd: []string{"never-run"}, Labels: map[string]string{"org.example": "yes"}},
			it.Busybox(t, false, "app:x:1234:1234:app:/home/app:/bin/sh\n", "app:x:1234:\n"))
		path := archive(t, img, false)
		// Through the CLI, as a user would.
		key := s.Keys()[len(s.Keys())-1]
		name := "app-" + e2etest.RunID()
		cmd := exec.Command(filepath.Join(e2etest.BinDir(), "cove"), "--url", s.URL, "images", "import", path, "--name", name, "--json")
		cmd.Env = append(os.Environ(), "COVE_API_KEY="+key, "HOME="+t.TempDir())
		if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), `"uid": 1234`) {
			t.Fatalf("cove images import: %v\n%s", err, out)
		}
		got, err := c.GetImage(t.Context(), name)
		if err != nil {
			t.Fatal(err)
		}
		cfg := got.Config
		if cfg.UID != 1234 || cfg.GID != 1234 || cfg.WorkingDir != "/srv/app" || cfg.Labels["org.example"] != "yes" ||
			!slices.Equal(cfg.Entrypoint, []string{"/bin/false"}) || !slices.Equal(cfg.Cmd, []string{"never-run"}) {
			t.Errorf("config %+v", cfg)
		}
		sb := e2etest.Create(t, c, api.CreateSandboxRequest{Template: got.Name})
		out := e2etest.MustOK(t, c, sb.ID, `echo "$(id -u):$(id -g) $GREETING in $(pwd)"; touch mine && stat -c %u mine`)
		if want := "1234:1234 hello from the image in /srv/app\n1234\n"; out != want {
			t.Errorf("as the image's user: %q; want %q", out, want)
		}
		if out := e2etest.MustOK(t, c, sb.ID, "id -u", e2etest.AsRoot); out != "0\n" {
			t.Errorf("as root: %q", out)
		}
		// The file API writes as the image's user too.
		if _, err := c.WriteFile(t.Context(), sb.ID, "/srv/app/from-api", strings.NewReader("x")); err != nil {
			t.Fatal(err)
		}
		if out := e2etest.MustOK(t, c, sb.ID, "stat -c %u:%g from-api"); out != "1234:1234\n" {
			t.Errorf("a file written through the API belongs to %q; want 1234:1234", out)
		}

		// Imported again under another name: the same tree.
		again := mustImport(t, c, "app-again-"+e2etest.RunID(), path, nil)
		if again.Digest != got.Digest {
			t.Errorf("digests %s and %s of one image", again.Digest, got.Digest)
		}
		n := 0
		for _, e := range s.stored(t) {
			if e == strings.Replace(got.Digest, ":", "-", 1) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("the image is stored %d times: %v", n, s.stored(t))
		}
	})

	// Three images stored (the user's twice by name, once on disk).
	if added := len(s.stored(t)) - len(before); added != 3 {
		t.Errorf("images dir gained %d entries; want 3: %v", added, s.stored(t))
	}
}

// TestRefusedArchives: a tampered layer, a ../ path, a device node and a
// set-user-ID file off the allowed list are refused with 400 saying why,
// and nothing is stored: the images dir and the image list are as before.
// Hostile layers (a symlink to a host directory, absolute or relative,
// then a file or a whiteout through it; a hard link out) write and delete
// nothing outside the image root.
func TestRefusedArchives(t *testing.T) {
	s := startServer(t)
	c, _ := s.team(t, "refused", imagesAdmission)
	base := it.Busybox(t, false, "", "")
	host := t.TempDir()
	victim := filepath.Join(host, "victim")
	if err := os.WriteFile(victim, []byte("host file"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		entries []it.Entry
		oci     bool
		says    string
	}{
		{"dotdot", []it.Entry{it.File("../../../../../.."+host+"/pwned", "x", 0o644)}, false, "leaves the image's root"},
		{"device node", []it.Entry{{Name: "dev/sda", Type: tar.TypeBlock, Mode: 0o660}}, true, "device node"},
		{"setuid", []it.Entry{it.File("bin/rootshell", "x", 0o4755)}, false, "not on the allowed list"},
		{"absolute symlink then file", []it.Entry{it.Symlink("esc", host), it.File("esc/pwned", "x", 0o644)}, true, "escapes"},
		{"relative symlink then file", []it.Entry{it.Symlink("up", "../../../../../../../.."+host), it.File("up/pwned", "x", 0o644)}, false, "escapes"},
		{"whiteout through symlink", []it.Entry{it.Symlink("w", host), it.Whiteout("w/victim")}, false, "escapes"},
		{"hard link out", []it.Entry{{Name: "hl", Type: tar.TypeLink, Link: "../../../../../.." + victim}}, false, "leaves the image's root"},
	}
	before := s.stored(t)
	list := func() int {
		l, err := s.Admin.Images(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return len(l.Items)
	}
	n := list()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			img := it.Image(t, v1.Config{}, base, it.Layer(t, tc.entries...))
			_, err := importFile(t, c, "refused-"+e2etest.RunID(), archive(t, img, tc.oci), nil)
			wantCode(t, err, api.CodeInvalidArgument, tc.says)
		})
	}
	t.Run("tampered layer", func(t *testing.T) {
		img := it.Image(t, v1.Config{}, base, it.Layer(t, it.File("f", "original", 0o644)))
		path := filepath.Join(t.TempDir(), "image.tar")
		it.OCIArchive(t, img, path, func(dir string) {
			blob := it.LayerBlob(t, img, 1, dir)
			other := it.Layer(t, it.File("f", "tampered", 0o644))
			rc, err := other.Compressed()
			if err != nil {
				t.Fatal(err)
			}
			defer rc.Close()
			f, err := os.Create(blob)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if _, err := f.ReadFrom(rc); err != nil {
				t.Fatal(err)
			}
		})
		_, err := importFile(t, c, "tampered-"+e2etest.RunID(), path, nil)
		wantCode(t, err, api.CodeInvalidArgument, "digest mismatch")
	})
	if after := s.stored(t); !slices.Equal(before, after) {
		t.Errorf("images dir changed: %v → %v", before, after)
	}
	if got := list(); got != n {
		t.Errorf("%d images listed after refused imports; want %d", got, n)
	}
	if b, err := os.ReadFile(victim); err != nil || string(b) != "host file" {
		t.Errorf("host file: %q, %v", b, err)
	}
	if ents, _ := os.ReadDir(host); len(ents) != 1 {
		t.Errorf("written outside the image root: %v", ents)
	}
}

// TestImageAdmission: a team without custom_images cannot import (403
// naming the flag); an image is 404 to a team it is not admitted to, and
// usable once an admin admits it to all teams (a team may not do that
// itself). A team that sees it but lacks custom_images gets 403 naming it.
func TestImageAdmission(t *testing.T) {
	s := startServer(t)
	a, _ := s.team(t, "owner", imagesAdmission)
	b, _ := s.team(t, "other", imagesAdmission)
	plain, _ := s.team(t, "plain", api.Admission{ManagedEnvironment: true})
	path := archive(t, it.Image(t, v1.Config{}, it.Busybox(t, false, "", "")), false)
	name := "shared-" + e2etest.RunID()

	_, err := importFile(t, plain, name, path, nil)
	wantCode(t, err, api.CodePermissionDenied, `"custom_images"`)

	img := mustImport(t, a, name, path, nil)
	if _, err := b.GetImage(t.Context(), img.ID); api.ErrorCode(err) != api.CodeNotFound {
		t.Errorf("another team's GET: %v; want not_found", err)
	}
	_, err = b.CreateSandbox(t.Context(), api.CreateSandboxRequest{Template: "owner-" + e2etest.RunID() + "/" + name}, false)
	wantCode(t, err, api.CodeNotFound, "does not exist")
	// Its bare name is the other team's own namespace, where it is not.
	_, err = b.CreateSandbox(t.Context(), api.CreateSandboxRequest{Template: name}, false)
	wantCode(t, err, api.CodeInvalidArgument, "does not exist")

	_, err = a.UpdateImage(t.Context(), img.ID, api.ImageSettings{Admission: &api.ImageAdmission{Mode: api.ImageAdmitAll}})
	wantCode(t, err, api.CodePermissionDenied, "only an admin")
	if _, err := s.Admin.UpdateImage(t.Context(), img.ID, api.ImageSettings{Admission: &api.ImageAdmission{Mode: api.ImageAdmitAll}}); err != nil {
		t.Fatal(err)
	}
	// Another team names it TEAM/NAME.
	sb := e2etest.Create(t, b, api.CreateSandboxRequest{Template: "owner-" + e2etest.RunID() + "/" + name})
	if out := e2etest.MustOK(t, b, sb.ID, "echo ok"); out != "ok\n" {
		t.Errorf("in the admitted image: %q", out)
	}
	_, err = plain.CreateSandbox(t.Context(), api.CreateSandboxRequest{Template: "owner-" + e2etest.RunID() + "/" + name}, false)
	wantCode(t, err, api.CodePermissionDenied, `"custom_images"`)
	// Seeing is not owning.
	if err := b.DeleteImage(t.Context(), img.ID); api.ErrorCode(err) != api.CodePermissionDenied {
		t.Errorf("another team's DELETE: %v; want permission_denied", err)
	}
}

// TestImageDefaultsAndLifecycle: an image's default resources and network
// policy apply to a create that names none, its limit bounds what a
// create asks; a file survives sleep and wake; DELETE answers 409 while a
// sandbox (asleep or running) uses the image, and after the sandbox is
// terminated deletes it and its files from the images dir.
func TestImageDefaultsAndLifecycle(t *testing.T) {
	s := startServer(t)
	c, _ := s.team(t, "life", imagesAdmission)
	cpus, mem, maxMem := 0.5, int64(300), int64(400)
	st := &api.ImageSettings{
		Defaults: &api.ImageDefaults{Resources: &api.ResourcesRequest{CPUs: &cpus, MemoryMiB: &mem},
			Network: &api.NetworkPolicy{Allow: []string{"example.org:443"}}},
		Limits:   &api.ImageLimits{MaxResources: &api.ResourcesRequest{MemoryMiB: &maxMem}},
		Examples: []string{"ls /"},
	}
	path := archive(t, it.Image(t, v1.Config{WorkingDir: "/work"}, it.Busybox(t, false, "", "")), true)
	img := mustImport(t, c, "life-"+e2etest.RunID(), path, st)
	if !slices.Equal(img.Examples, []string{"ls /"}) {
		t.Errorf("examples %v", img.Examples)
	}
	big := int64(500)
	_, err := c.CreateSandbox(t.Context(), api.CreateSandboxRequest{Template: img.Name, Resources: &api.ResourcesRequest{MemoryMiB: &big}}, false)
	wantCode(t, err, api.CodeInvalidArgument, "limit")

	sb := e2etest.Create(t, c, api.CreateSandboxRequest{Template: img.Name})
	if sb.Resources.CPUs != cpus || sb.Resources.MemoryMiB != mem || !slices.Equal(sb.Network.Allow, []string{"example.org:443"}) || sb.Workdir != "/work" {
		t.Errorf("sandbox resources %+v network %v workdir %s; want the image's defaults", sb.Resources, sb.Network.Allow, sb.Workdir)
	}
	e2etest.MustOK(t, c, sb.ID, "echo kept > /work/note")

	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	if _, err := c.SleepSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if got, err := c.WaitSandbox(ctx, sb.ID, api.StateAsleep, 2*time.Minute); err != nil || got.State != api.StateAsleep {
		t.Fatalf("sleep: %+v %v", got.State, err)
	}
	wantCode(t, c.DeleteImage(ctx, img.ID), api.CodeConflict, "terminate them first")
	if _, err := c.WakeSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if got, err := c.WaitSandbox(ctx, sb.ID, api.StateRunning, 2*time.Minute); err != nil || got.State != api.StateRunning {
		t.Fatalf("wake: %+v %v", got.State, err)
	}
	if out := e2etest.MustOK(t, c, sb.ID, "cat /work/note"); out != "kept\n" {
		t.Errorf("after wake: %q", out)
	}
	wantCode(t, c.DeleteImage(ctx, img.ID), api.CodeConflict, "terminate them first")

	if _, err := c.TerminateSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if got, err := c.WaitSandbox(ctx, sb.ID, api.StateTerminated, 2*time.Minute); err != nil || got.State != api.StateTerminated {
		t.Fatalf("terminate: %+v %v", got.State, err)
	}
	if err := c.DeleteImage(ctx, img.ID); err != nil {
		t.Fatal(err)
	}
	if slices.Contains(s.stored(t), strings.Replace(img.Digest, ":", "-", 1)) {
		t.Errorf("the image's files stay in the images dir: %v", s.stored(t))
	}
	if _, err := c.GetImage(ctx, img.ID); api.ErrorCode(err) != api.CodeNotFound {
		t.Errorf("GET after DELETE: %v", err)
	}
}

// TestImageSurvivesRestart: after cove serve restarts, a running sandbox
// of an imported image keeps running its commands as the image's user, a
// new sandbox of it starts, and the image still cannot be deleted while
// they live (the control plane reloads its images at Recover).
func TestImageSurvivesRestart(t *testing.T) {
	s := startServer(t)
	c, _ := s.team(t, "restart", imagesAdmission)
	img := it.Image(t, v1.Config{User: "app", Env: []string{"PATH=/bin"}},
		it.Busybox(t, false, "app:x:1234:1234:app:/home/app:/bin/sh\n", "app:x:1234:\n"))
	got := mustImport(t, c, "restart-"+e2etest.RunID(), archive(t, img, true), nil)
	sb := e2etest.Create(t, c, api.CreateSandboxRequest{Template: got.Name})

	s.Stop(syscall.SIGTERM)
	s.Start()

	if out := e2etest.MustOK(t, c, sb.ID, "id -u; echo $USER"); out != "1234\napp\n" {
		t.Errorf("after restart: %q", out)
	}
	sb2 := e2etest.Create(t, c, api.CreateSandboxRequest{Template: got.Name})
	if out := e2etest.MustOK(t, c, sb2.ID, "id -u"); out != "1234\n" {
		t.Errorf("new sandbox after restart: %q", out)
	}
	wantCode(t, c.DeleteImage(t.Context(), got.ID), api.CodeConflict, "terminate them first")
}
