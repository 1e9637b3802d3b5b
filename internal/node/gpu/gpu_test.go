package gpu

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

func TestPick(t *testing.T) {
	tests := []struct {
		name string
		in   []string
		want []string
	}{
		{"none", nil, nil},
		{"by index, all left out, numeric order", []string{"nvidia.com/gpu=all", "nvidia.com/gpu=10", "nvidia.com/gpu=2", "nvidia.com/gpu=GPU-1234"},
			[]string{"nvidia.com/gpu=2", "nvidia.com/gpu=10"}},
		{"by uuid only", []string{"nvidia.com/gpu=all", "nvidia.com/gpu=GPU-b", "nvidia.com/gpu=GPU-a"},
			[]string{"nvidia.com/gpu=GPU-a", "nvidia.com/gpu=GPU-b"}},
		{"other kinds left out", []string{"vendor.com/net=0", "nvidia.com/gpu=0"}, []string{"nvidia.com/gpu=0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := pick(DefaultKind, tt.in); !slices.Equal(got, tt.want) {
				t.Errorf("pick = %v; want %v", got, tt.want)
			}
		})
	}
}

// TestOpenAndInject reads a spec as nvidia-ctk writes them (a device per
// index, "all", common edits) and injects one device: its node and
// cgroup rule, the common mounts, hooks and environment.
func TestOpenAndInject(t *testing.T) {
	dir := t.TempDir()
	spec := `cdiVersion: 0.5.0
kind: nvidia.com/gpu
devices:
- name: "0"
  containerEdits:
    deviceNodes:
    - path: /dev/null
- name: all
  containerEdits:
    deviceNodes:
    - path: /dev/null
containerEdits:
  env:
  - NVIDIA_VISIBLE_DEVICES=void
  hooks:
  - hookName: createContainer
    path: /usr/bin/nvidia-ctk
    args: [nvidia-ctk, hook, update-ldcache]
  mounts:
  - hostPath: /etc/hostname
    containerPath: /usr/lib/libcuda.so.1
    options: [ro, nosuid, nodev, bind]
`
	if err := os.WriteFile(filepath.Join(dir, "nvidia.yaml"), []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := Open([]string{dir, filepath.Join(dir, "missing")}, "")
	if err != nil {
		t.Fatal(err)
	}
	if d.Kind() != DefaultKind || !slices.Equal(d.Names(), []string{"nvidia.com/gpu=0"}) {
		t.Fatalf("devices: %s %v", d.Kind(), d.Names())
	}
	s := &specs.Spec{Process: &specs.Process{}, Linux: &specs.Linux{Resources: &specs.LinuxResources{
		Devices: []specs.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}}}}}
	if err := d.Inject(s, d.Names()); err != nil {
		t.Fatal(err)
	}
	if len(s.Linux.Devices) != 1 || s.Linux.Devices[0].Path != "/dev/null" || s.Linux.Devices[0].Major != 1 || s.Linux.Devices[0].Minor != 3 {
		t.Errorf("devices: %+v", s.Linux.Devices)
	}
	if r := s.Linux.Resources.Devices; len(r) != 2 || !r[1].Allow || *r[1].Major != 1 {
		t.Errorf("cgroup rules: %+v", r)
	}
	if len(s.Mounts) != 1 || s.Mounts[0].Destination != "/usr/lib/libcuda.so.1" {
		t.Errorf("mounts: %+v", s.Mounts)
	}
	if s.Hooks == nil || len(s.Hooks.CreateContainer) != 1 || s.Hooks.CreateContainer[0].Path != "/usr/bin/nvidia-ctk" {
		t.Errorf("hooks: %+v", s.Hooks)
	}
	if !slices.Contains(s.Process.Env, "NVIDIA_VISIBLE_DEVICES=void") {
		t.Errorf("env: %v", s.Process.Env)
	}
	if err := d.Inject(s, []string{"nvidia.com/gpu=7"}); err == nil {
		t.Error("an unknown device was injected")
	}
	os.WriteFile(filepath.Join(dir, "broken.json"), []byte("{"), 0o644)
	if _, err := Open([]string{dir}, ""); err == nil {
		t.Error("a broken spec was accepted")
	}
}
