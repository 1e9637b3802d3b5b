package lifecycle_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/lifecycle"
	"github.com/cove-dev/cove/internal/node"
	"github.com/cove-dev/cove/internal/node/nodetest"
)

// The workload queue and GPU placement over the real SQLite store and
// the fake node with GPUs, in synctest bubbles: max_queue_s passes on the
// bubble's clock.

// gpuNode is the fake node advertising GPUs.
type gpuNode struct {
	*nodetest.Node
	gpus node.GPUs
}

func (g gpuNode) GPUs() node.GPUs { return g.gpus }

var twoGPUs = node.GPUs{Type: "nvidia.com/gpu", Names: []string{"nvidia.com/gpu=0", "nvidia.com/gpu=1"}}

// queueHarness is a started harness over a node with gpus whose
// workloads run until release is closed; team a may use GPUs.
func queueHarness(t *testing.T, gpus node.GPUs, release chan struct{}) *harness {
	t.Helper()
	h := newHarness(t)
	h.node.Run = func(ctx context.Context, spec node.ExecSpec, out *nodetest.Output) node.Exit {
		if _, ok := spec.Env["COVE_WORKLOAD_ID"]; ok {
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return node.Exit{}
	}
	h.plane.SetNode(gpuNode{h.node, gpus})
	adm := api.Admission{ManagedEnvironment: true, GPU: true}
	if _, err := h.plane.Teams.UpdateTeam(t.Context(), h.admin, h.a, api.UpdateTeamRequest{Admission: &adm}); err != nil {
		t.Fatal(err)
	}
	h.srv.Start()
	return h
}

func (h *harness) submit(t *testing.T, req api.CreateWorkloadRequest) api.Workload {
	t.Helper()
	w, err := h.plane.Workloads.SubmitWorkload(t.Context(), h.a, req)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func (h *harness) workload(t *testing.T, id string) api.Workload {
	t.Helper()
	w, err := h.plane.Workloads.GetWorkload(t.Context(), h.a, id)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func gpus(n int) *api.WorkloadResourcesRequest { return &api.WorkloadResourcesRequest{GPUs: n} }

// TestGPUPlacement: workloads get distinct free GPUs; one that asks for
// more than are free waits in the queue saying why, and is placed on the
// GPUs freed by the end of another.
func TestGPUPlacement(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		h := queueHarness(t, twoGPUs, release)
		first := h.submit(t, api.CreateWorkloadRequest{Command: "train", Resources: gpus(1)})
		second := h.submit(t, api.CreateWorkloadRequest{Command: "train", Resources: gpus(1)})
		synctest.Wait()
		a, b := h.workload(t, first.ID), h.workload(t, second.ID)
		if a.State != api.WorkloadRunning || b.State != api.WorkloadRunning {
			t.Fatalf("states %s, %s; want both running", a.State, b.State)
		}
		if len(a.Devices) != 1 || len(b.Devices) != 1 || a.Devices[0] == b.Devices[0] {
			t.Fatalf("devices %v and %v; want one distinct GPU each", a.Devices, b.Devices)
		}
		if n, _ := h.node.Sandbox(first.ID); !slices.Equal(n.Spec.Devices, a.Devices) {
			t.Errorf("node started %s with %v, want %v", first.ID, n.Spec.Devices, a.Devices)
		}
		third := h.submit(t, api.CreateWorkloadRequest{Command: "train", Resources: gpus(2)})
		time.Sleep(5 * time.Second)
		synctest.Wait()
		c := h.workload(t, third.ID)
		if c.State != api.WorkloadQueued || !strings.Contains(c.StateReason, "2 of 2 are in use") {
			t.Fatalf("third is %s (%q); want queued waiting for GPUs", c.State, c.StateReason)
		}
		close(release) // the first two end
		synctest.Wait()
		time.Sleep(2 * time.Second)
		synctest.Wait()
		c = h.workload(t, third.ID)
		if c.State == api.WorkloadQueued || len(c.Devices) != 2 {
			t.Fatalf("third is %s with %v after the others ended; want placed on both GPUs", c.State, c.Devices)
		}
	})
}

// TestQueueRefusals: a workload the node can never place fails at its
// max_queue_s with the reason, and not before; a cancel in the queue
// ends it cancelled.
func TestQueueRefusals(t *testing.T) {
	tests := []struct {
		name   string
		gpus   node.GPUs
		req    api.CreateWorkloadRequest
		cancel bool
		want   api.WorkloadState
		reason string
	}{
		{"no GPUs on the node", node.GPUs{}, api.CreateWorkloadRequest{Command: "x", Resources: gpus(1), MaxQueueS: i64(60)}, false, api.WorkloadFailed, "no node has GPUs"},
		{"other type", twoGPUs, api.CreateWorkloadRequest{Command: "x", Resources: &api.WorkloadResourcesRequest{GPUs: 1, GPUType: "amd.com/gpu"}, MaxQueueS: i64(60)}, false, api.WorkloadFailed, "of type amd.com/gpu"},
		{"too many", twoGPUs, api.CreateWorkloadRequest{Command: "x", Resources: gpus(3), MaxQueueS: i64(60)}, false, api.WorkloadFailed, "the node has 2"},
		{"cancelled", node.GPUs{}, api.CreateWorkloadRequest{Command: "x", Resources: gpus(1)}, true, api.WorkloadCancelled, "cancelled by request"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := queueHarness(t, tt.gpus, make(chan struct{}))
				w := h.submit(t, tt.req)
				time.Sleep(50 * time.Second)
				synctest.Wait()
				if got := h.workload(t, w.ID); got.State != api.WorkloadQueued {
					t.Fatalf("after 50 s it is %s (%q), want queued", got.State, got.StateReason)
				}
				if tt.cancel {
					if _, err := h.plane.Workloads.CancelWorkload(t.Context(), h.a, w.ID); err != nil {
						t.Fatal(err)
					}
				}
				time.Sleep(15 * time.Second)
				synctest.Wait()
				got := h.workload(t, w.ID)
				if got.State != tt.want || !strings.Contains(got.StateReason, tt.reason) {
					t.Fatalf("after 65 s it is %s (%q), want %s (%q)", got.State, got.StateReason, tt.want, tt.reason)
				}
				if len(h.node.Calls()) > 0 && slices.Contains(h.node.Calls(), "start "+w.ID) {
					t.Errorf("the node started a workload it could not place")
				}
			})
		})
	}
}

// TestQueueCap: a team has at most MaxQueuedWorkloadsPerTeam queued.
func TestQueueCap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarnessWith(t, func(c *lifecycle.Config) { c.MaxQueuedWorkloadsPerTeam = 2 })
		adm := api.Admission{ManagedEnvironment: true, GPU: true}
		if _, err := h.plane.Teams.UpdateTeam(t.Context(), h.admin, h.a, api.UpdateTeamRequest{Admission: &adm}); err != nil {
			t.Fatal(err)
		}
		// Not started: nothing leaves the queue.
		for range 2 {
			h.submit(t, api.CreateWorkloadRequest{Command: "x", Resources: gpus(1)})
		}
		_, err := h.plane.Workloads.SubmitWorkload(t.Context(), h.a, api.CreateWorkloadRequest{Command: "x"})
		wantCode(t, err, api.CodeResourceExhausted)
		if _, err := h.plane.Workloads.SubmitWorkload(t.Context(), h.b, api.CreateWorkloadRequest{Command: "x"}); err != nil {
			t.Fatalf("another team's submit: %v", err)
		}
	})
}
