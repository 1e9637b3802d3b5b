package agentguard

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"strings"
	"testing"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
	cove "github.com/cove-dev/cove/sdk/go"
)

func tarGz(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for name, body := range files {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(body))
	}
	tw.Close()
	zw.Close()
	return buf.Bytes()
}

func code(err error) api.Code {
	var e *api.Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// TestFilesDoNotFollowUserSymlinks: `user` plants /workspace/cfg ->
// /etc/profile.d; file calls through it (writes as the default user or as
// root, archives into it or through it, mkdir) are refused and nothing
// appears in /etc/profile.d, while the writes `user` and root may do still
// work.
func TestFilesDoNotFollowUserSymlinks(t *testing.T) {
	s := e2etest.StartServer(t)
	sb := e2etest.Create(t, s.Admin, api.CreateSandboxRequest{})
	c, ctx := s.Admin, t.Context()
	before := e2etest.MustOK(t, c, sb.ID, "mkdir -p /etc/profile.d && ls -A /etc/profile.d", e2etest.AsRoot)
	e2etest.MustOK(t, c, sb.ID, "ln -s /etc/profile.d /workspace/cfg")

	refused := []struct {
		name string
		call func() error
		want api.Code
	}{
		{"write as the default user", func() error {
			_, err := c.WriteFile(ctx, sb.ID, "/workspace/cfg/x.sh", strings.NewReader("echo owned\n"))
			return err
		}, api.CodePermissionDenied},
		{"write as root", func() error {
			_, err := c.WriteFile(ctx, sb.ID, "/workspace/cfg/x.sh", strings.NewReader("echo owned\n"), cove.AsUser("root"))
			return err
		}, api.CodePermissionDenied},
		{"write below a new directory", func() error {
			_, err := c.WriteFile(ctx, sb.ID, "/workspace/cfg/d/x.sh", strings.NewReader("echo owned\n"))
			return err
		}, api.CodePermissionDenied},
		{"archive into the link", func() error {
			_, err := c.WriteArchive(ctx, sb.ID, "/workspace/cfg", bytes.NewReader(tarGz(t, map[string]string{"x.sh": "echo owned\n"})))
			return err
		}, api.CodePermissionDenied},
		{"archive as root into the link", func() error {
			_, err := c.WriteArchive(ctx, sb.ID, "/workspace/cfg", bytes.NewReader(tarGz(t, map[string]string{"x.sh": "echo owned\n"})), cove.AsUser("root"))
			return err
		}, api.CodePermissionDenied},
		{"archive whose entry goes through the link", func() error {
			_, err := c.WriteArchive(ctx, sb.ID, "/workspace", bytes.NewReader(tarGz(t, map[string]string{"cfg/x.sh": "echo owned\n"})))
			return err
		}, api.CodeConflict},
		{"mkdir", func() error {
			_, err := c.Mkdir(ctx, sb.ID, "/workspace/cfg/d")
			return err
		}, api.CodePermissionDenied},
	}
	for _, tt := range refused {
		if err := tt.call(); code(err) != tt.want {
			t.Errorf("%s: %v, want %s", tt.name, err, tt.want)
		}
	}
	if after := e2etest.MustOK(t, c, sb.ID, "ls -A /etc/profile.d", e2etest.AsRoot); after != before {
		t.Errorf("/etc/profile.d holds %q, held %q", after, before)
	}
	if out := e2etest.MustOK(t, c, sb.ID, "ls -A /workspace /etc"); strings.Contains(out, ".cove-") {
		t.Errorf("temporary files left: %q", out)
	}

	// What user and root may write, they still do.
	e, err := c.WriteFile(ctx, sb.ID, "/workspace/ok.txt", strings.NewReader("mine\n"))
	if err != nil || e.UID != 1000 {
		t.Errorf("user's write in /workspace: %+v %v", e, err)
	}
	e, err = c.WriteFile(ctx, sb.ID, "/etc/profile.d/root.sh", strings.NewReader("echo root\n"), cove.AsUser("root"))
	if err != nil || e.UID != 0 {
		t.Errorf("root's write in /etc/profile.d: %+v %v", e, err)
	}
	if out := e2etest.MustOK(t, c, sb.ID, "cat /etc/profile.d/root.sh /workspace/ok.txt"); out != "echo root\nmine\n" {
		t.Errorf("written: %q", out)
	}
}
