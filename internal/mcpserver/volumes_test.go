package mcpserver

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/cove-dev/cove/api"
)

// withVolume gives the fake a volume "cache", mounted by the sandboxes
// named.
func withVolume(sandboxes ...string) func(f *fakeAPI) {
	return func(f *fakeAPI) {
		f.volumes = append(f.volumes, api.Volume{ID: "vol_1", TeamID: "team_1", Name: "cache", SizeMiB: 64, UsedBytes: 4096, Sandboxes: append([]string{}, sandboxes...)})
	}
}

func TestVolumeTools(t *testing.T) {
	for _, tc := range []struct {
		tool  string
		cases []toolCase
	}{
		{"create_volume", []toolCase{
			{name: "made", args: map[string]any{"name": "cache", "size_mib": 64}, check: func(t *testing.T, f *fakeAPI, r result) {
				want := Volume{ID: "vol_1", Name: "cache", SizeMiB: 64, Sandboxes: []string{}}
				if diff := cmp.Diff(want, as[Volume](t, r)); diff != "" {
					t.Errorf("output (-want +got):\n%s", diff)
				}
				if len(f.volumes) != 1 || f.volumes[0].SizeMiB != 64 {
					t.Errorf("volumes %+v", f.volumes)
				}
			}},
			{name: "no size", args: map[string]any{"name": "cache"}, wantErr: "size_mib", check: noCalls},
			{name: "no name", args: map[string]any{"size_mib": 64}, wantErr: "name", check: noCalls},
			{name: "taken", args: map[string]any{"name": "cache", "size_mib": 64}, setup: withVolume(), wantErr: `conflict: a volume named "cache" already exists`},
			{name: "API error", args: map[string]any{"name": "Bad", "size_mib": 64},
				setup: failing("create_volume", api.CodeInvalidArgument, "name: want 1 to 63 of [a-z0-9-]"), wantErr: "invalid_argument: name"},
		}},
		{"list_volumes", []toolCase{
			{name: "listed", args: map[string]any{}, setup: withVolume("sb1"), check: func(t *testing.T, f *fakeAPI, r result) {
				want := Volumes{Volumes: []Volume{{ID: "vol_1", Name: "cache", SizeMiB: 64, UsedBytes: 4096, Sandboxes: []string{"sb1"}}}}
				if diff := cmp.Diff(want, as[Volumes](t, r)); diff != "" {
					t.Errorf("output (-want +got):\n%s", diff)
				}
				if f.volumeQ != "limit=50" {
					t.Errorf("query %q; want limit=50", f.volumeQ)
				}
			}},
			{name: "more", args: map[string]any{"limit": 1}, setup: func(f *fakeAPI) {
				withVolume()(f)
				f.volumes = append(f.volumes, api.Volume{ID: "vol_2", Name: "data"})
			}, check: func(t *testing.T, f *fakeAPI, r result) {
				if out := as[Volumes](t, r); len(out.Volumes) != 1 || !out.More {
					t.Errorf("output %+v; want one volume and more", out)
				}
			}},
			{name: "none", args: map[string]any{}, check: func(t *testing.T, f *fakeAPI, r result) {
				if out := as[Volumes](t, r); out.Volumes == nil || len(out.Volumes) != 0 || out.More {
					t.Errorf("output %+v", out)
				}
			}},
		}},
		{"delete_volume", []toolCase{
			{name: "deleted", args: map[string]any{"volume": "cache"}, setup: withVolume(), check: func(t *testing.T, f *fakeAPI, r result) {
				if out := as[Deleted](t, r); out.Deleted != "cache" || len(f.volumes) != 0 {
					t.Errorf("output %+v, volumes %+v", out, f.volumes)
				}
			}},
			{name: "mounted", args: map[string]any{"volume": "vol_1"}, setup: withVolume("sb1"), wantErr: "conflict: volume vol_1 is mounted by sb1",
				check: func(t *testing.T, f *fakeAPI, r result) {
					if len(f.volumes) != 1 {
						t.Errorf("volumes %+v", f.volumes)
					}
				}},
			{name: "unknown", args: map[string]any{"volume": "nope"}, wantErr: "not_found: volume nope not found"},
			{name: "no volume", args: map[string]any{}, wantErr: "volume", check: noCalls},
		}},
		{"create_sandbox", []toolCase{
			{name: "with volumes", args: map[string]any{"volumes": []map[string]any{{"name": "cache", "path": "/cache", "read_only": true}}},
				setup: withVolume(), check: func(t *testing.T, f *fakeAPI, r result) {
					if diff := cmp.Diff([]api.VolumeMount{{Name: "cache", Path: "/cache", ReadOnly: true}}, f.create.Volumes); diff != "" {
						t.Errorf("sent volumes (-want +got):\n%s", diff)
					}
					if diff := cmp.Diff([]VolumeMount{{Name: "cache", Path: "/cache", ReadOnly: true, VolumeID: "vol_1"}}, as[Sandbox](t, r).Volumes); diff != "" {
						t.Errorf("sandbox's volumes (-want +got):\n%s", diff)
					}
				}},
			{name: "unknown volume", args: map[string]any{"volumes": []map[string]any{{"name": "nope", "path": "/x"}}}, wantErr: "not_found: volume nope not found"},
			{name: "no volumes sent when none given", args: map[string]any{}, check: func(t *testing.T, f *fakeAPI, r result) {
				if f.create.Volumes != nil || as[Sandbox](t, r).Volumes != nil {
					t.Errorf("volumes %+v", f.create.Volumes)
				}
			}},
		}},
	} {
		t.Run(tc.tool, func(t *testing.T) { runCases(t, tc.tool, tc.cases) })
	}
}
