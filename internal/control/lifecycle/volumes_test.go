package lifecycle_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/lifecycle"
	"github.com/cove-dev/cove/internal/control/meter"
	"github.com/cove-dev/cove/internal/control/page"
	"github.com/cove-dev/cove/internal/node"
	"github.com/cove-dev/cove/internal/node/nodetest"
)

// volumeNode is the fake node with volumes: it keeps each volume's size
// and the use the test sets, places every volume on node "n1", and
// records what it was asked. The volume is made and dropped in the fake
// it wraps too, where the fake keeps volumes (it checks a start's), and
// its answer that it keeps none (unprocessable) is passed over.
type volumeNode struct {
	*nodetest.Node
	mu      sync.Mutex
	volumes map[string]node.VolumeInfo
	dropped []string
}

func (n *volumeNode) CreateVolume(ctx context.Context, id string, sizeMiB int64) (node.VolumeRef, error) {
	if _, err := n.Node.CreateVolume(ctx, id, sizeMiB); err != nil && api.ErrorCode(err) != api.CodeUnprocessable {
		return node.VolumeRef{}, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.volumes[id] = node.VolumeInfo{SizeBytes: sizeMiB << 20}
	return node.VolumeRef{ID: id, Node: "n1"}, nil
}

func (n *volumeNode) DropVolume(ctx context.Context, v node.VolumeRef) error {
	if err := n.Node.DropVolume(ctx, v); err != nil && api.ErrorCode(err) != api.CodeUnprocessable {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.volumes, v.ID)
	n.dropped = append(n.dropped, v.ID)
	return nil
}

func (n *volumeNode) VolumeUsage(ctx context.Context, v node.VolumeRef) (node.VolumeInfo, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	info, ok := n.volumes[v.ID]
	if !ok {
		return node.VolumeInfo{}, api.Errorf(api.CodeNotFound, "volume %s not found", v.ID)
	}
	return info, nil
}

// use sets a volume's measured use.
func (n *volumeNode) use(id string, used int64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	info := n.volumes[id]
	info.UsedBytes = used
	info.Full = used >= info.SizeBytes
	n.volumes[id] = info
}

// volumeHarness is the harness over a node with volumes.
func volumeHarness(t *testing.T, edit func(*lifecycle.Config)) (*harness, *volumeNode) {
	t.Helper()
	h := newHarnessWith(t, edit)
	vn := &volumeNode{Node: h.node, volumes: map[string]node.VolumeInfo{}}
	h.plane.SetNode(vn)
	return h, vn
}

func (h *harness) volume(t *testing.T, team, name string, mib int64) api.Volume {
	t.Helper()
	v, err := h.srv.CreateVolume(t.Context(), team, api.CreateVolumeRequest{Name: name, SizeMiB: mib})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// teamEvents are the team's events of type typ, oldest first.
func (h *harness) teamEvents(t *testing.T, team, typ string) []api.Event {
	t.Helper()
	l, err := h.plane.Events.ListEvents(t.Context(), team, lifecycle.EventQuery{Page: lifecycle.Page{Limit: 1000}})
	if err != nil {
		t.Fatal(err)
	}
	var out []api.Event
	for _, e := range l.Items {
		if e.Type == typ {
			out = append(out, e)
		}
	}
	return out
}

// TestCreateVolumeValidation: a volume's name and size are checked
// before anything is made, each refusal naming the field.
func TestCreateVolumeValidation(t *testing.T) {
	h, vn := volumeHarness(t, func(c *lifecycle.Config) { c.MaxVolumeMiB = 1024 })
	h.volume(t, h.a, "taken", 16)
	for _, tt := range []struct {
		name string
		req  api.CreateVolumeRequest
		code api.Code
		msg  string
	}{
		{"no name", api.CreateVolumeRequest{SizeMiB: 64}, api.CodeInvalidArgument, "name is required"},
		{"bad name", api.CreateVolumeRequest{Name: "Data_1", SizeMiB: 64}, api.CodeInvalidArgument, "is invalid"},
		{"too small", api.CreateVolumeRequest{Name: "small", SizeMiB: 15}, api.CodeInvalidArgument, "size_mib is 15; it must be between 16 and 1024"},
		{"zero", api.CreateVolumeRequest{Name: "zero"}, api.CodeInvalidArgument, "size_mib"},
		{"too large", api.CreateVolumeRequest{Name: "large", SizeMiB: 1025}, api.CodeInvalidArgument, "between 16 and 1024"},
		{"name taken", api.CreateVolumeRequest{Name: "taken", SizeMiB: 16}, api.CodeConflict, "already exists"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := h.srv.CreateVolume(t.Context(), h.a, tt.req)
			wantCode(t, err, tt.code)
			if !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("err = %v, want it to say %q", err, tt.msg)
			}
		})
	}
	// The same name in another team is another volume.
	h.volume(t, h.b, "taken", 16)
	if len(vn.volumes) != 2 {
		t.Errorf("the node holds %d volumes, want 2: %v", len(vn.volumes), vn.volumes)
	}
}

// TestVolumeTeamCap: a team's volumes are bounded in count and in total
// size; past either a create answers 507 and nothing is made.
func TestVolumeTeamCap(t *testing.T) {
	h, vn := volumeHarness(t, func(c *lifecycle.Config) {
		c.MaxVolumesPerTeam = 2
		c.MaxVolumeMiBPerTeam = 100
	})
	h.volume(t, h.a, "one", 60)
	_, err := h.srv.CreateVolume(t.Context(), h.a, api.CreateVolumeRequest{Name: "two", SizeMiB: 41})
	wantCode(t, err, api.CodeInsufficientStorage)
	h.volume(t, h.a, "two", 40)
	_, err = h.srv.CreateVolume(t.Context(), h.a, api.CreateVolumeRequest{Name: "three", SizeMiB: 16})
	wantCode(t, err, api.CodeInsufficientStorage)
	h.volume(t, h.b, "three", 16) // another team's cap is its own
	if len(vn.volumes) != 3 {
		t.Errorf("the node holds %d volumes, want 3", len(vn.volumes))
	}
}

// TestVolumeLifeCycle: a volume is found by ID or name in its team only
// (another team's is 404 everywhere: get, delete, mount); sandboxes mount
// it with the mounts kept and given to the node at start and wake; a
// delete while a sandbox not terminated mounts it answers 409 naming
// them, and once they are gone the node drops it; events are raised.
func TestVolumeLifeCycle(t *testing.T) {
	h, vn := volumeHarness(t, func(*lifecycle.Config) {})
	ctx := t.Context()
	v := h.volume(t, h.a, "data", 64)
	if !strings.HasPrefix(v.ID, "vol_") || v.TeamID != h.a || v.SizeMiB != 64 || v.Node != "n1" || len(v.Sandboxes) != 0 {
		t.Fatalf("created %+v", v)
	}
	for _, ref := range []string{v.ID, "data"} {
		got, err := h.srv.GetVolume(ctx, h.a, ref)
		if err != nil || got.ID != v.ID {
			t.Fatalf("get %s = %+v, %v", ref, got, err)
		}
		_, err = h.srv.GetVolume(ctx, h.b, ref)
		wantCode(t, err, api.CodeNotFound)
		wantCode(t, h.srv.DeleteVolume(ctx, h.b, ref), api.CodeNotFound)
		_, err = h.srv.CreateSandbox(ctx, h.b, api.CreateSandboxRequest{Volumes: []api.VolumeMount{{Name: ref, Path: "/data"}}})
		wantCode(t, err, api.CodeNotFound)
	}
	if l, err := h.srv.ListVolumes(ctx, h.b, lifecycle.VolumeQuery{}); err != nil || len(l.Items) != 0 {
		t.Fatalf("team b lists %+v, %v; want none", l.Items, err)
	}

	mk := func(name string, ro bool) api.Sandbox {
		sb, err := h.srv.CreateSandbox(ctx, h.a, api.CreateSandboxRequest{Name: name, Volumes: []api.VolumeMount{{Name: "data", Path: "/mnt/data", ReadOnly: ro}}})
		if err != nil {
			t.Fatal(err)
		}
		want := []api.VolumeMount{{Name: "data", VolumeID: v.ID, Path: "/mnt/data", ReadOnly: ro}}
		if !slices.Equal(sb.Volumes, want) {
			t.Fatalf("created with volumes %+v, want %+v", sb.Volumes, want)
		}
		sb = h.wait(t, h.a, sb.ID, api.StateRunning)
		if !slices.Equal(sb.Volumes, want) {
			t.Fatalf("stored with volumes %+v, want %+v", sb.Volumes, want)
		}
		n, _ := h.node.Sandbox(sb.ID)
		wantSpec := []node.VolumeMount{{VolumeRef: node.VolumeRef{ID: v.ID, Node: "n1"}, Path: "/mnt/data", ReadOnly: ro}}
		if !slices.Equal(n.Spec.Volumes, wantSpec) {
			t.Fatalf("started with volumes %+v, want %+v", n.Spec.Volumes, wantSpec)
		}
		return sb
	}
	s1 := mk("one", false)
	s2 := mk("two", true)
	got, err := h.srv.GetVolume(ctx, h.a, "data")
	if err != nil || !slices.Equal(got.Sandboxes, []string{s1.ID, s2.ID}) {
		t.Fatalf("volume's sandboxes = %v, %v; want %s, %s", got.Sandboxes, err, s1.ID, s2.ID)
	}

	// A sleep and a wake mount it again.
	if _, err := h.srv.SleepSandbox(ctx, h.a, s1.ID, "test"); err != nil {
		t.Fatal(err)
	}
	h.wait(t, h.a, s1.ID, api.StateAsleep)
	err = h.srv.DeleteVolume(ctx, h.a, "data")
	wantCode(t, err, api.CodeConflict)
	if !strings.Contains(err.Error(), s1.ID) || !strings.Contains(err.Error(), s2.ID) {
		t.Fatalf("409 %v does not name both sandboxes", err)
	}
	if d := err.(*api.Error).Details["sandboxes"]; !slices.Equal(d.([]string), []string{s1.ID, s2.ID}) {
		t.Fatalf("409 details %v", d)
	}
	if _, err := h.srv.WakeSandbox(ctx, h.a, s1.ID); err != nil {
		t.Fatal(err)
	}
	h.wait(t, h.a, s1.ID, api.StateRunning)
	if n, _ := h.node.Sandbox(s1.ID); len(n.Spec.Volumes) != 1 || n.Spec.Volumes[0].ID != v.ID {
		t.Fatalf("woken with volumes %+v", n.Spec.Volumes)
	}

	for _, sb := range []api.Sandbox{s1, s2} {
		if _, err := h.srv.TerminateSandbox(ctx, h.a, sb.ID); err != nil {
			t.Fatal(err)
		}
		h.wait(t, h.a, sb.ID, api.StateTerminated)
	}
	if len(vn.dropped) != 0 {
		t.Fatalf("dropped %v before the delete", vn.dropped)
	}
	if err := h.srv.DeleteVolume(ctx, h.a, "data"); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(vn.dropped, []string{v.ID}) {
		t.Fatalf("node dropped %v, want %s", vn.dropped, v.ID)
	}
	_, err = h.srv.GetVolume(ctx, h.a, v.ID)
	wantCode(t, err, api.CodeNotFound)
	// A sandbox that named it can no longer be made.
	_, err = h.srv.CreateSandbox(ctx, h.a, api.CreateSandboxRequest{Volumes: []api.VolumeMount{{Name: "data", Path: "/data"}}})
	wantCode(t, err, api.CodeNotFound)

	created, deleted := h.teamEvents(t, h.a, "volume.created"), h.teamEvents(t, h.a, "volume.deleted")
	if len(created) != 1 || created[0].Data["volume_id"] != v.ID || created[0].Data["name"] != "data" {
		t.Errorf("volume.created events %+v", created)
	}
	if len(deleted) != 1 || deleted[0].Data["volume_id"] != v.ID {
		t.Errorf("volume.deleted events %+v", deleted)
	}
	if ev := h.teamEvents(t, h.b, "volume.created"); len(ev) != 0 {
		t.Errorf("team b saw %+v", ev)
	}
}

// TestVolumeMountValidation: where volumes are mounted is checked before
// any is looked up: absolute, clean, never over the sandbox's own
// filesystems or cove's mounts (nor above them), never nesting, at most
// 16; each refusal is 400 naming the field, and nothing is created.
func TestVolumeMountValidation(t *testing.T) {
	h, _ := volumeHarness(t, func(*lifecycle.Config) {})
	h.volume(t, h.a, "data", 16)
	h.volume(t, h.a, "more", 16)
	m := func(name, p string) api.VolumeMount { return api.VolumeMount{Name: name, Path: p} }
	many := make([]api.VolumeMount, 17)
	for i := range many {
		many[i] = m("data", fmt.Sprintf("/v%d", i))
	}
	for _, tt := range []struct {
		name   string
		mounts []api.VolumeMount
		code   api.Code
		field  string
	}{
		{"no path", []api.VolumeMount{m("data", "")}, api.CodeInvalidArgument, "volumes[0].path"},
		{"relative", []api.VolumeMount{m("data", "data")}, api.CodeInvalidArgument, "volumes[0].path"},
		{"dot dot", []api.VolumeMount{m("data", "/data/../etc")}, api.CodeInvalidArgument, "volumes[0].path"},
		{"trailing slash", []api.VolumeMount{m("data", "/data/")}, api.CodeInvalidArgument, "volumes[0].path"},
		{"double slash", []api.VolumeMount{m("data", "//data")}, api.CodeInvalidArgument, "volumes[0].path"},
		{"root", []api.VolumeMount{m("data", "/")}, api.CodeInvalidArgument, "volumes[0].path"},
		{"proc", []api.VolumeMount{m("data", "/proc")}, api.CodeInvalidArgument, "volumes[0].path"},
		{"under proc", []api.VolumeMount{m("data", "/proc/self")}, api.CodeInvalidArgument, "volumes[0].path"},
		{"sys", []api.VolumeMount{m("data", "/sys/fs/cgroup")}, api.CodeInvalidArgument, "volumes[0].path"},
		{"dev", []api.VolumeMount{m("data", "/dev")}, api.CodeInvalidArgument, "volumes[0].path"},
		{"dev shm", []api.VolumeMount{m("data", "/dev/shm")}, api.CodeInvalidArgument, "volumes[0].path"},
		{"resolv.conf", []api.VolumeMount{m("data", "/etc/resolv.conf")}, api.CodeInvalidArgument, "volumes[0].path"},
		{"hosts", []api.VolumeMount{m("data", "/etc/hosts")}, api.CodeInvalidArgument, "volumes[0].path"},
		{"hostname", []api.VolumeMount{m("data", "/etc/hostname")}, api.CodeInvalidArgument, "volumes[0].path"},
		{"above cove's mounts", []api.VolumeMount{m("data", "/etc")}, api.CodeInvalidArgument, "volumes[0].path"},
		{"ca bundle's dir", []api.VolumeMount{m("data", "/etc/ssl")}, api.CodeInvalidArgument, "volumes[0].path"},
		{"agent", []api.VolumeMount{m("data", "/.cove")}, api.CodeInvalidArgument, "volumes[0].path"},
		{"control char", []api.VolumeMount{m("data", "/da\nta")}, api.CodeInvalidArgument, "volumes[0].path"},
		{"no name", []api.VolumeMount{m("", "/data")}, api.CodeInvalidArgument, "volumes[0].name"},
		{"same path", []api.VolumeMount{m("data", "/data"), m("more", "/data")}, api.CodeInvalidArgument, "volumes[1].path"},
		{"nested", []api.VolumeMount{m("data", "/data"), m("more", "/data/more")}, api.CodeInvalidArgument, "volumes[1].path"},
		{"nesting", []api.VolumeMount{m("data", "/a/b"), m("more", "/a")}, api.CodeInvalidArgument, "volumes[1].path"},
		{"twice", []api.VolumeMount{m("data", "/one"), m("data", "/two")}, api.CodeInvalidArgument, "volumes[1].name"},
		{"too many", many, api.CodeInvalidArgument, "volumes"},
		{"unknown", []api.VolumeMount{m("nope", "/data")}, api.CodeNotFound, "volumes[0].name"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := h.srv.CreateSandbox(t.Context(), h.a, api.CreateSandboxRequest{Volumes: tt.mounts})
			wantCode(t, err, tt.code)
			var e *api.Error
			if !asAPIError(err, &e) || e.Details["field"] != tt.field {
				t.Errorf("err %v: details %v, want field %s", err, e, tt.field)
			}
		})
	}
	l, err := h.srv.ListSandboxes(t.Context(), h.a, lifecycle.SandboxQuery{})
	if err != nil || len(l.Items) != 0 {
		t.Fatalf("refused creates left %d sandboxes (%v)", len(l.Items), err)
	}
	// Paths beside the reserved ones are fine.
	for _, p := range []string{"/workspace", "/etc/app", "/devices", "/proc2", "/home/user/data", "/etc/hosts.d"} {
		sb, err := h.srv.CreateSandbox(t.Context(), h.a, api.CreateSandboxRequest{Volumes: []api.VolumeMount{m("data", p)}})
		if err != nil {
			t.Fatalf("mount at %s: %v", p, err)
		}
		h.wait(t, h.a, sb.ID, api.StateRunning)
	}
}

// TestVolumeWarmPoolAndFork: a create with volumes never takes a warm
// sandbox (its volumes are mounted at start); a fork mounts its parent's
// volumes where the parent does.
func TestVolumeWarmPoolAndFork(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, _ := volumeHarness(t, func(c *lifecycle.Config) { c.WarmPool = 1 })
		h.srv.Start()
		v := h.volume(t, h.a, "data", 16)
		synctest.Wait()
		if ready, target := h.srv.WarmPool(); ready != 1 || target != 1 {
			t.Fatalf("pool %d of %d, want 1 of 1", ready, target)
		}
		known, _ := h.node.Known(t.Context())
		sb, err := h.srv.CreateSandbox(t.Context(), h.a, api.CreateSandboxRequest{Volumes: []api.VolumeMount{{Name: "data", Path: "/data"}}})
		if err != nil {
			t.Fatal(err)
		}
		if slices.Contains(known, sb.ID) {
			t.Fatalf("a create with volumes took the warm sandbox %s", sb.ID)
		}
		if ready, _ := h.srv.WarmPool(); ready != 1 {
			t.Fatalf("pool has %d ready after a create with volumes, want 1", ready)
		}
		sb = h.wait(t, h.a, sb.ID, api.StateRunning)

		forks, err := h.srv.ForkSandbox(t.Context(), h.a, sb.ID, api.ForkSandboxRequest{Count: 2})
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range forks {
			want := []api.VolumeMount{{Name: "data", VolumeID: v.ID, Path: "/data"}}
			if !slices.Equal(f.Volumes, want) {
				t.Fatalf("fork %s mounts %+v, want %+v", f.ID, f.Volumes, want)
			}
			h.wait(t, h.a, f.ID, api.StateRunning)
			if n, _ := h.node.Sandbox(f.ID); len(n.Spec.Volumes) != 1 || n.Spec.Volumes[0].ID != v.ID {
				t.Fatalf("fork %s started with volumes %+v", f.ID, n.Spec.Volumes)
			}
		}
		got, err := h.srv.GetVolume(t.Context(), h.a, v.ID)
		if err != nil || len(got.Sandboxes) != 3 {
			t.Fatalf("volume mounted by %v (%v), want the parent and its 2 forks", got.Sandboxes, err)
		}
	})
}

// TestVolumeFull: the volumes running sandboxes mount are measured; their
// use is recorded, and volume.full is raised once per crossing, again
// only after the use dropped below 90% of the size.
func TestVolumeFull(t *testing.T) {
	h, vn := volumeHarness(t, func(*lifecycle.Config) {})
	ctx := t.Context()
	v := h.volume(t, h.a, "data", 16)
	idle := h.volume(t, h.a, "idle", 16)
	sb, err := h.srv.CreateSandbox(ctx, h.a, api.CreateSandboxRequest{Volumes: []api.VolumeMount{{Name: "data", Path: "/data"}}})
	if err != nil {
		t.Fatal(err)
	}
	h.wait(t, h.a, sb.ID, api.StateRunning)
	size := int64(16 << 20)

	steps := []struct {
		used  int64
		fulls int
	}{
		{size / 2, 0},
		{size, 1},            // crossing
		{size, 1},            // still full: no second event
		{size * 95 / 100, 1}, // dropped, but not below 90%: not re-armed
		{size, 1},
		{size * 80 / 100, 1}, // re-armed
		{size * 80 / 100, 1},
		{size, 2}, // a second crossing
	}
	for i, st := range steps {
		vn.use(v.ID, st.used)
		vn.use(idle.ID, size) // mounted by nothing running: never measured
		h.srv.PollVolumes(ctx)
		got, err := h.srv.GetVolume(ctx, h.a, v.ID)
		if err != nil || got.UsedBytes != st.used {
			t.Fatalf("step %d: used_bytes %d (%v), want %d", i, got.UsedBytes, err, st.used)
		}
		fulls := h.teamEvents(t, h.a, "volume.full")
		if len(fulls) != st.fulls {
			t.Fatalf("step %d (used %d): %d volume.full events, want %d", i, st.used, len(fulls), st.fulls)
		}
	}
	e := h.teamEvents(t, h.a, "volume.full")[0]
	want := map[string]any{"volume_id": v.ID, "name": "data", "size_mib": float64(16), "used_bytes": float64(size)}
	for k, w := range want {
		if fmt.Sprint(e.Data[k]) != fmt.Sprint(w) {
			t.Errorf("volume.full %s = %v, want %v", k, e.Data[k], w)
		}
	}
	if got, _ := h.srv.GetVolume(ctx, h.a, idle.ID); got.UsedBytes != 0 {
		t.Errorf("a volume no running sandbox mounts was measured: %d", got.UsedBytes)
	}
	if ev := h.teamEvents(t, h.b, "volume.full"); len(ev) != 0 {
		t.Errorf("team b saw %+v", ev)
	}
}

// TestVolumeCharged: a volume is charged as storage for its size, used
// or not, from its creation, in usage under its ID.
func TestVolumeCharged(t *testing.T) {
	h, c := meterHarness(t) // storage at $0.001 per GiB-second
	vn := &volumeNode{Node: h.node, volumes: map[string]node.VolumeInfo{}}
	h.plane.SetNode(vn)
	ctx := t.Context()
	v := h.volume(t, h.a, "data", 2048) // 2 GiB, nothing written
	c.add(10 * time.Second)
	h.plane.Meter.Tick(ctx)
	r, err := h.plane.Meter.Usage(ctx, h.a, meter.UsageQuery{GroupBy: "sandbox"})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Items) != 1 || r.Items[0].SandboxID != v.ID || !near(r.Items[0].StorageGiBH, 20.0/3600, 1e-9) || !near(r.Items[0].CostUSD, 0.02, 1e-9) || r.Items[0].CPUS != 0 {
		t.Fatalf("usage = %+v; want the volume's 2 GiB for 10 s: 20 GiB-s, $0.02", r.Items)
	}
	// A tick seen twice charges nothing twice.
	h.plane.Meter.Tick(ctx)
	if r2, _ := h.plane.Meter.Usage(ctx, h.a, meter.UsageQuery{GroupBy: "sandbox"}); !near(r2.Total.CostUSD, 0.02, 1e-9) {
		t.Fatalf("after a second tick: %+v", r2.Total)
	}
	if rb, _ := h.plane.Meter.Usage(ctx, h.b, meter.UsageQuery{GroupBy: "sandbox"}); len(rb.Items) != 0 {
		t.Fatalf("team b is charged %+v", rb.Items)
	}
}

// TestVolumeWebhooks: volume events go to the owning team's webhooks
// that ask for them, and to no other team's.
func TestVolumeWebhooks(t *testing.T) {
	h, vn := volumeHarness(t, func(*lifecycle.Config) {})
	ctx := t.Context()
	hook := func(team string) string {
		resp, err := h.plane.Webhooks.Create(ctx, team, api.CreateWebhookRequest{URL: "https://93.184.215.14/hook", Events: []string{"volume.*"}})
		if err != nil {
			t.Fatal(err)
		}
		return resp.Webhook.ID
	}
	wa, wb := hook(h.a), hook(h.b)
	v := h.volume(t, h.a, "data", 16)
	sb, err := h.srv.CreateSandbox(ctx, h.a, api.CreateSandboxRequest{Volumes: []api.VolumeMount{{Name: "data", Path: "/data"}}})
	if err != nil {
		t.Fatal(err)
	}
	h.wait(t, h.a, sb.ID, api.StateRunning)
	vn.use(v.ID, 16<<20)
	h.srv.PollVolumes(ctx)
	if _, err := h.srv.TerminateSandbox(ctx, h.a, sb.ID); err != nil {
		t.Fatal(err)
	}
	h.wait(t, h.a, sb.ID, api.StateTerminated)
	if err := h.srv.DeleteVolume(ctx, h.a, v.ID); err != nil {
		t.Fatal(err)
	}
	types := func(team, w string) []string {
		l, err := h.plane.Webhooks.Deliveries(ctx, team, w, page.Page{})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, d := range l.Items {
			out = append([]string{d.EventType}, out...)
		}
		return out
	}
	if got := types(h.a, wa); !slices.Equal(got, []string{"volume.created", "volume.full", "volume.deleted"}) {
		t.Errorf("team a's deliveries %v", got)
	}
	if got := types(h.b, wb); len(got) != 0 {
		t.Errorf("team b's deliveries %v", got)
	}
}
