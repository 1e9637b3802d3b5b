// Package volumes holds the root tests of team volumes (issue #32): disks
// that outlive sandboxes and that several sandboxes of a team mount at
// once, against a real `cove serve`.
package volumes

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
	cove "github.com/cove-dev/cove/sdk/go"
)

func TestMain(m *testing.M) { e2etest.Main(m) }

// hostRange is the host uid that root of sandbox id is.
func hostRange(t *testing.T, c *cove.Client, id string) string {
	t.Helper()
	f := strings.Fields(e2etest.MustOK(t, c, id, "cat /proc/self/uid_map", e2etest.AsRoot))
	if len(f) != 3 {
		t.Fatalf("uid_map of %s: %q", id, f)
	}
	return f[1]
}

func mount(name, path string, ro bool) []api.VolumeMount {
	return []api.VolumeMount{{Name: name, Path: path, ReadOnly: ro}}
}

// waitEvent waits for the team's first event of type typ, or fails.
func waitEvent(t *testing.T, c *cove.Client, typ string) api.Event {
	t.Helper()
	for range 300 {
		l, err := c.Events(t.Context(), cove.EventQuery{Types: []string{typ}})
		if err != nil {
			t.Fatal(err)
		}
		if len(l.Items) > 0 {
			return l.Items[0]
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("no %s event", typ)
	return api.Event{}
}

// TestShared: two sandboxes of a team, in different uid ranges, mount one
// volume and see each other's writes, owned by user:user in both; a
// read-only mount refuses writes; a write past the size fails with
// ENOSPC inside and raises volume.full outside; a sleep and a wake keep
// it; the volume outlives both sandboxes; a delete while it is mounted
// answers 409 naming the sandboxes, then succeeds once they are gone.
func TestShared(t *testing.T) {
	s := e2etest.StartServer(t, e2etest.WithArgs("--warm-pool", "0", "--volume-usage-interval", "200ms", "--metrics-interval", "200ms"))
	c, ctx := s.Admin, t.Context()
	v, err := c.CreateVolume(ctx, "data", 32)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(v.ID, "vol_") || v.SizeMiB != 32 || v.Name != "data" {
		t.Fatalf("created %+v", v)
	}
	a := e2etest.Create(t, c, api.CreateSandboxRequest{Name: "a", Volumes: mount("data", "/data", false)})
	b := e2etest.Create(t, c, api.CreateSandboxRequest{Name: "b", Volumes: mount(v.ID, "/mnt/shared", false)})
	if ra, rb := hostRange(t, c, a.ID), hostRange(t, c, b.ID); ra == rb {
		t.Fatalf("both sandboxes run in host range %s", ra)
	}
	if want := []api.VolumeMount{{Name: "data", VolumeID: v.ID, Path: "/mnt/shared"}}; !slices.Equal(b.Volumes, want) {
		t.Errorf("b's volumes %+v, want %+v", b.Volumes, want)
	}

	e2etest.MustOK(t, c, a.ID, "echo from-a > /data/a && mkdir /data/dir && echo deep > /data/dir/f")
	if out := e2etest.MustOK(t, c, b.ID, "cat /mnt/shared/a /mnt/shared/dir/f && echo from-b > /mnt/shared/b"); out != "from-a\ndeep\n" {
		t.Errorf("b reads %q", out)
	}
	if out := e2etest.MustOK(t, c, a.ID, "cat /data/b"); out != "from-b\n" {
		t.Errorf("a reads %q", out)
	}
	for _, sb := range []struct{ id, dir string }{{a.ID, "/data"}, {b.ID, "/mnt/shared"}} {
		out := e2etest.MustOK(t, c, sb.id, fmt.Sprintf("cd %s && stat -c '%%n %%U:%%G' a b dir dir/f", sb.dir))
		if want := "a user:user\nb user:user\ndir user:user\ndir/f user:user\n"; out != want {
			t.Errorf("owners in %s: %q, want %q", sb.id, out, want)
		}
	}
	got, err := c.GetVolume(ctx, "data")
	if err != nil || !slices.Equal(got.Sandboxes, []string{a.ID, b.ID}) {
		t.Errorf("volume's sandboxes %v (%v), want %s, %s", got.Sandboxes, err, a.ID, b.ID)
	}

	// Read-only: the files are there, a write fails.
	ro := e2etest.Create(t, c, api.CreateSandboxRequest{Volumes: mount("data", "/ro", true)})
	r := e2etest.Sh(t, c, ro.ID, "cat /ro/a && echo x > /ro/x")
	if e2etest.ExitCode(r) == 0 || r.Stdout != "from-a\n" || !strings.Contains(r.Stderr, "Read-only file system") {
		t.Errorf("write on a read-only mount: exit %d, %q, %q", e2etest.ExitCode(r), r.Stdout, r.Stderr)
	}
	r = e2etest.Sh(t, c, ro.ID, "echo x > /ro/x", e2etest.AsRoot)
	if e2etest.ExitCode(r) == 0 {
		t.Errorf("root wrote on a read-only mount")
	}

	// The quota holds: dd past it fails with ENOSPC inside, and
	// volume.full is raised outside.
	r = e2etest.Sh(t, c, a.ID, "dd if=/dev/zero of=/data/big bs=1M count=64 conv=fsync", e2etest.WithTimeout(120))
	if e2etest.ExitCode(r) == 0 || !strings.Contains(r.Stderr, "No space left on device") {
		t.Fatalf("dd past the quota: exit %d, %q", e2etest.ExitCode(r), r.Stderr)
	}
	if n, err := strconv.ParseInt(strings.TrimSpace(e2etest.MustOK(t, c, b.ID, "stat -c %s /mnt/shared/big")), 10, 64); err != nil || n >= 32<<20 {
		t.Errorf("a file of %d bytes (%v) on a 32 MiB volume", n, err)
	}
	e := waitEvent(t, c, "volume.full")
	if e.Data["volume_id"] != v.ID || e.Data["name"] != "data" || e.Data["size_mib"] != float64(32) {
		t.Errorf("volume.full %+v", e.Data)
	}
	if used, _ := e.Data["used_bytes"].(float64); used < 16<<20 {
		t.Errorf("volume.full used_bytes %v", e.Data["used_bytes"])
	}
	if got, err := c.GetVolume(ctx, v.ID); err != nil || got.UsedBytes < 16<<20 {
		t.Errorf("used_bytes after the fill: %d (%v)", got.UsedBytes, err)
	}
	e2etest.MustOK(t, c, a.ID, "rm /data/big")

	// Charged as storage, listed in usage under its ID.
	var charged api.Usage
	for i := 0; i < 100 && charged.StorageGiBH == 0; i++ {
		time.Sleep(100 * time.Millisecond)
		u, err := c.Usage(ctx, cove.UsageQuery{GroupBy: "sandbox"})
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range u.Items {
			if it.SandboxID == v.ID {
				charged = it
			}
		}
	}
	if charged.StorageGiBH <= 0 || charged.CostUSD <= 0 || charged.CPUS != 0 {
		t.Errorf("the volume's usage: %+v", charged)
	}

	// Asleep, then woken: the volume is mounted again.
	if _, err := c.SleepSandbox(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitSandbox(ctx, a.ID, api.StateAsleep, time.Minute); err != nil {
		t.Fatal(err)
	}
	e2etest.MustOK(t, c, b.ID, "echo while-asleep > /mnt/shared/c")
	if _, err := c.WakeSandbox(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if sb, err := c.WaitSandbox(ctx, a.ID, api.StateRunning, time.Minute); err != nil || sb.State != api.StateRunning {
		t.Fatalf("wake: %+v %v", sb, err)
	}
	if out := e2etest.MustOK(t, c, a.ID, "cat /data/a /data/c && stat -c %U:%G /data/c"); out != "from-a\nwhile-asleep\nuser:user\n" {
		t.Errorf("after a wake: %q", out)
	}

	// Mounted: 409 naming the sandboxes.
	code, er, body := e2etest.RawRequest(t, http.MethodDelete, s.URL+"/v1/volumes/data", s.AdminKey, "")
	if code != http.StatusConflict || er.Error == nil || er.Error.Code != api.CodeConflict {
		t.Fatalf("delete while mounted: %d %s", code, body)
	}
	for _, id := range []string{a.ID, b.ID, ro.ID} {
		if !strings.Contains(er.Error.Message, id) {
			t.Errorf("409 %q does not name %s", er.Error.Message, id)
		}
	}

	// It outlives both sandboxes: a new one sees their files as user's.
	for _, id := range []string{a.ID, b.ID, ro.ID} {
		if _, err := c.TerminateSandbox(ctx, id); err != nil {
			t.Fatal(err)
		}
		if _, err := c.WaitSandbox(ctx, id, api.StateTerminated, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := c.GetVolume(ctx, v.ID); err != nil || len(got.Sandboxes) != 0 {
		t.Errorf("after terminating them: %+v %v", got, err)
	}
	d := e2etest.Create(t, c, api.CreateSandboxRequest{Volumes: mount("data", "/home/user/data", false)})
	if out := e2etest.MustOK(t, c, d.ID, "cd /home/user/data && cat a b dir/f && stat -c %U:%G a b && ls big 2>&1 | grep -c 'No such'"); out != "from-a\nfrom-b\ndeep\nuser:user\nuser:user\n1\n" {
		t.Errorf("a third sandbox reads %q", out)
	}
	if err := c.DeleteVolume(ctx, "data"); api.ErrorCode(err) != api.CodeConflict {
		t.Fatalf("delete while d mounts it: %v", err)
	}
	if _, err := c.TerminateSandbox(ctx, d.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitSandbox(ctx, d.ID, api.StateTerminated, time.Minute); err != nil {
		t.Fatal(err)
	}
	if code, _, body := e2etest.RawRequest(t, http.MethodDelete, s.URL+"/v1/volumes/data", s.AdminKey, ""); code != http.StatusNoContent {
		t.Fatalf("delete once unmounted: %d %s", code, body)
	}
	if _, err := c.GetVolume(ctx, v.ID); api.ErrorCode(err) != api.CodeNotFound {
		t.Errorf("after the delete: %v", err)
	}
	waitEvent(t, c, "volume.deleted")
	// The name is free again.
	if _, err := c.CreateVolume(ctx, "data", 16); err != nil {
		t.Errorf("a new volume of the deleted one's name: %v", err)
	}
}

// TestOtherTeam: another team's volume is 404 everywhere: get and delete
// by ID or name, a sandbox that names it, its list; its own volume of
// the same name is another.
func TestOtherTeam(t *testing.T) {
	s := e2etest.StartServer(t, e2etest.WithArgs("--warm-pool", "0"))
	c, ctx := s.Admin, t.Context()
	v, err := c.CreateVolume(ctx, "shared", 16)
	if err != nil {
		t.Fatal(err)
	}
	sb := e2etest.Create(t, c, api.CreateSandboxRequest{Volumes: mount("shared", "/data", false)})
	e2etest.MustOK(t, c, sb.ID, "echo secret > /data/s")

	o := s.NewTeam("other")
	for _, ref := range []string{v.ID, "shared"} {
		if _, err := o.GetVolume(ctx, ref); api.ErrorCode(err) != api.CodeNotFound {
			t.Errorf("other team gets %s: %v", ref, err)
		}
		if err := o.DeleteVolume(ctx, ref); api.ErrorCode(err) != api.CodeNotFound {
			t.Errorf("other team deletes %s: %v", ref, err)
		}
		_, err := o.CreateSandbox(ctx, api.CreateSandboxRequest{Volumes: mount(ref, "/data", false)}, false)
		if api.ErrorCode(err) != api.CodeNotFound {
			t.Errorf("other team mounts %s: %v", ref, err)
		}
	}
	if l, err := o.ListVolumes(ctx, 0, ""); err != nil || len(l.Items) != 0 {
		t.Errorf("other team lists %+v %v", l.Items, err)
	}
	if l, err := o.Events(ctx, cove.EventQuery{Types: []string{"volume.created"}}); err != nil || len(l.Items) != 0 {
		t.Errorf("other team sees events %+v %v", l.Items, err)
	}
	// Its own volume of the same name is its own, empty.
	mine, err := o.CreateVolume(ctx, "shared", 16)
	if err != nil || mine.ID == v.ID {
		t.Fatalf("other team's own volume: %+v %v", mine, err)
	}
	osb := e2etest.Create(t, o, api.CreateSandboxRequest{Volumes: mount("shared", "/data", false)})
	if out := e2etest.MustOK(t, o, osb.ID, "ls -A /data | grep -v lost+found | wc -l"); out != "0\n" {
		t.Errorf("other team's volume holds %q", out)
	}
	// The volume is still the first team's, whole.
	if out := e2etest.MustOK(t, c, sb.ID, "cat /data/s"); out != "secret\n" {
		t.Errorf("after the other team's tries: %q", out)
	}
}

// TestValidation: bad volumes and bad mounts answer 400 invalid_argument
// in API.md's format, naming the field, before anything is made.
func TestValidation(t *testing.T) {
	s := e2etest.StartServer(t, e2etest.WithArgs("--warm-pool", "0", "--max-volume-mib", "64"))
	for _, tt := range []struct {
		name, method, path, body string
		field                    string
	}{
		{"no name", "POST", "/v1/volumes", `{"size_mib":16}`, "name"},
		{"bad name", "POST", "/v1/volumes", `{"name":"Bad Name","size_mib":16}`, ""},
		{"too small", "POST", "/v1/volumes", `{"name":"v","size_mib":8}`, "size_mib"},
		{"past --max-volume-mib", "POST", "/v1/volumes", `{"name":"v","size_mib":65}`, "size_mib"},
		{"unknown field", "POST", "/v1/volumes", `{"name":"v","size_mib":16,"quota":1}`, ""},
		{"relative path", "POST", "/v1/sandboxes", `{"volumes":[{"name":"v","path":"data"}]}`, "volumes[0].path"},
		{"root", "POST", "/v1/sandboxes", `{"volumes":[{"name":"v","path":"/"}]}`, "volumes[0].path"},
		{"proc", "POST", "/v1/sandboxes", `{"volumes":[{"name":"v","path":"/proc/sys"}]}`, "volumes[0].path"},
		{"sys", "POST", "/v1/sandboxes", `{"volumes":[{"name":"v","path":"/sys"}]}`, "volumes[0].path"},
		{"dev", "POST", "/v1/sandboxes", `{"volumes":[{"name":"v","path":"/dev/shm"}]}`, "volumes[0].path"},
		{"resolv.conf", "POST", "/v1/sandboxes", `{"volumes":[{"name":"v","path":"/etc/resolv.conf"}]}`, "volumes[0].path"},
		{"above cove's mounts", "POST", "/v1/sandboxes", `{"volumes":[{"name":"v","path":"/etc"}]}`, "volumes[0].path"},
		{"not clean", "POST", "/v1/sandboxes", `{"volumes":[{"name":"v","path":"/data/../proc"}]}`, "volumes[0].path"},
		{"nested", "POST", "/v1/sandboxes", `{"volumes":[{"name":"v","path":"/data"},{"name":"w","path":"/data/w"}]}`, "volumes[1].path"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, er, body := e2etest.RawRequest(t, tt.method, s.URL+tt.path, s.AdminKey, tt.body)
			if code != http.StatusBadRequest || er.Error == nil || er.Error.Code != api.CodeInvalidArgument {
				t.Fatalf("answered %d %s", code, body)
			}
			if tt.field != "" && er.Error.Details["field"] != tt.field {
				t.Errorf("details %v, want field %s", er.Error.Details, tt.field)
			}
		})
	}
	// An unknown volume is 404; nothing was made.
	code, er, body := e2etest.RawRequest(t, "POST", s.URL+"/v1/sandboxes", s.AdminKey, `{"volumes":[{"name":"nope","path":"/data"}]}`)
	if code != http.StatusNotFound || er.Error == nil || er.Error.Code != api.CodeNotFound {
		t.Fatalf("unknown volume: %d %s", code, body)
	}
	if l, err := s.Admin.ListSandboxes(t.Context(), cove.SandboxQuery{}); err != nil || len(l.Items) != 0 {
		t.Errorf("refused creates left %d sandboxes (%v)", len(l.Items), err)
	}
	if l, err := s.Admin.ListVolumes(t.Context(), 0, ""); err != nil || len(l.Items) != 0 {
		t.Errorf("refused creates left volumes %+v (%v)", l.Items, err)
	}
}

// TestRestart: a sandbox keeps its volume across a restart of `cove
// serve` (killed, so nothing is unmounted in order), and across a sleep
// and a wake after it; the volume and its rows are still there.
func TestRestart(t *testing.T) {
	s := e2etest.StartServer(t, e2etest.WithArgs("--warm-pool", "0"))
	c, ctx := s.Admin, t.Context()
	v, err := c.CreateVolume(ctx, "kept", 16)
	if err != nil {
		t.Fatal(err)
	}
	sb := e2etest.Create(t, c, api.CreateSandboxRequest{Volumes: mount("kept", "/data", false)})
	e2etest.MustOK(t, c, sb.ID, "echo before > /data/f")

	s.Stop(syscall.SIGKILL)
	s.Start()
	if got, err := c.GetSandbox(ctx, sb.ID); err != nil || got.State != api.StateRunning || len(got.Volumes) != 1 || got.Volumes[0].VolumeID != v.ID {
		t.Fatalf("after the restart: %+v %v", got, err)
	}
	if out := e2etest.MustOK(t, c, sb.ID, "cat /data/f && echo after > /data/g"); out != "before\n" {
		t.Errorf("after the restart: %q", out)
	}
	if _, err := c.SleepSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitSandbox(ctx, sb.ID, api.StateAsleep, time.Minute); err != nil {
		t.Fatal(err)
	}
	s.Stop(syscall.SIGTERM)
	s.Start()
	if _, err := c.WakeSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if got, err := c.WaitSandbox(ctx, sb.ID, api.StateRunning, time.Minute); err != nil || got.State != api.StateRunning {
		t.Fatalf("wake after a restart: %+v %v", got, err)
	}
	if out := e2etest.MustOK(t, c, sb.ID, "cat /data/f /data/g"); out != "before\nafter\n" {
		t.Errorf("after a wake: %q", out)
	}
	if got, err := c.GetVolume(ctx, "kept"); err != nil || !slices.Equal(got.Sandboxes, []string{sb.ID}) {
		t.Errorf("the volume after restarts: %+v %v", got, err)
	}
}
