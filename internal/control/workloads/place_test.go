package workloads

import (
	"slices"
	"strings"
	"testing"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/node"
)

func TestPlaceGPUs(t *testing.T) {
	two := node.GPUs{Type: "nvidia.com/gpu", Names: []string{"nvidia.com/gpu=0", "nvidia.com/gpu=1"}}
	tests := []struct {
		name   string
		res    api.WorkloadResources
		gpus   node.GPUs
		held   []string
		want   []string
		reason string
	}{
		{"cpu only on a node without GPUs", api.WorkloadResources{}, node.GPUs{}, nil, nil, ""},
		{"no GPUs", api.WorkloadResources{GPUs: 1}, node.GPUs{}, nil, nil, "no node has GPUs"},
		{"first free", api.WorkloadResources{GPUs: 1}, two, nil, []string{"nvidia.com/gpu=0"}, ""},
		{"skips held", api.WorkloadResources{GPUs: 1}, two, []string{"nvidia.com/gpu=0"}, []string{"nvidia.com/gpu=1"}, ""},
		{"all held", api.WorkloadResources{GPUs: 1}, two, two.Names, nil, "2 of 2 are in use"},
		{"more than the node has", api.WorkloadResources{GPUs: 3}, two, nil, nil, "the node has 2"},
		{"both", api.WorkloadResources{GPUs: 2}, two, nil, two.Names, ""},
		{"type matches", api.WorkloadResources{GPUs: 1, GPUType: "nvidia.com/gpu"}, two, nil, []string{"nvidia.com/gpu=0"}, ""},
		{"other type", api.WorkloadResources{GPUs: 1, GPUType: "amd.com/gpu"}, two, nil, nil, "of type amd.com/gpu"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			held := map[string]bool{}
			for _, h := range tt.held {
				held[h] = true
			}
			got, reason := placeGPUs(tt.res, tt.gpus, held)
			if !slices.Equal(got, tt.want) || (tt.reason == "") != (reason == "") || !strings.Contains(reason, tt.reason) {
				t.Errorf("placeGPUs = %v, %q; want %v, %q", got, reason, tt.want, tt.reason)
			}
		})
	}
}
