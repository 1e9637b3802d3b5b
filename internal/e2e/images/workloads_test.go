package images

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
	it "github.com/cove-dev/cove/internal/images/imagetest"
	"github.com/cove-dev/cove/internal/node/image"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// TestImageInUseByWorkloads: DELETE /v1/images/{id} answers 409 while a
// workload on the image is queued (a GPU one on a node without GPUs) or
// running, and deletes it once they ended.
func TestImageInUseByWorkloads(t *testing.T) {
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
	s := server{e2etest.StartServer(t, e2etest.WithArgs("--images-dir", dir, "--warm-pool", "0", "--cdi-spec-dirs", t.TempDir())), dir}
	c, _ := s.team(t, "wlimg", api.Admission{ManagedEnvironment: true, CustomImages: true, GPU: true})
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	path := archive(t, it.Image(t, v1.Config{}, it.Busybox(t, false, "", "")), true)
	img := mustImport(t, c, "wlimg-"+e2etest.RunID(), path, nil)

	submit := func(req api.CreateWorkloadRequest) api.Workload {
		t.Helper()
		w, err := c.SubmitWorkload(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			c.CancelWorkload(ctx, w.ID)
		})
		return w
	}
	wait := func(w api.Workload, state api.WorkloadState) {
		t.Helper()
		got, err := c.WaitWorkload(ctx, w.ID, state, 3*time.Minute)
		if err != nil || got.State != state {
			t.Fatalf("workload %s: %s (%s), %v; want %s", w.ID, got.State, got.StateReason, err, state)
		}
	}
	cancelIt := func(w api.Workload) {
		t.Helper()
		if _, err := c.CancelWorkload(ctx, w.ID); err != nil {
			t.Fatal(err)
		}
		wait(w, api.WorkloadCancelled)
	}

	queued := submit(api.CreateWorkloadRequest{Image: img.Name, Command: "true", Resources: &api.WorkloadResourcesRequest{GPUs: 1}})
	if got, err := c.GetWorkload(ctx, queued.ID); err != nil || got.State != api.WorkloadQueued {
		t.Fatalf("GPU workload on a node without GPUs: %+v, %v; want queued", got, err)
	}
	wantCode(t, c.DeleteImage(ctx, img.ID), api.CodeConflict, "workloads that have not ended")
	cancelIt(queued)

	running := submit(api.CreateWorkloadRequest{Image: img.Name, Command: "sleep 600", Resources: &api.WorkloadResourcesRequest{}})
	wait(running, api.WorkloadRunning)
	wantCode(t, c.DeleteImage(ctx, img.ID), api.CodeConflict, "workloads that have not ended")
	cancelIt(running)

	if err := c.DeleteImage(ctx, img.ID); err != nil {
		t.Fatalf("delete once its workloads ended: %v", err)
	}
	if _, err := c.GetImage(ctx, img.ID); api.ErrorCode(err) != api.CodeNotFound {
		t.Errorf("GET after DELETE: %v", err)
	}
}
