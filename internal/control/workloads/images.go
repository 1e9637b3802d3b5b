package workloads

import (
	"context"
	"fmt"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/store"
)

// RefuseImage refuses, with conflict, deleting img (owned by
// team owner) while a workload that names it (by its name in its team,
// qualified in others) is queued, starting or running: it would fail to
// start, or lose its tree under it.
func (s *Service) RefuseImage(ctx context.Context, img api.Image, owner string) error {
	name, qualified := img.Name, owner+"/"+img.Name
	live, err := s.store.ListWorkloads(ctx, store.WorkloadFilter{
		States: []api.WorkloadState{api.WorkloadQueued, api.WorkloadStarting, api.WorkloadRunning},
	})
	if err != nil {
		return err
	}
	var ids []string
	for _, w := range live {
		if (w.TeamID == img.TeamID && w.Template == name) || w.Template == qualified {
			ids = append(ids, w.ID)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	return &api.Error{Code: api.CodeConflict,
		Message: fmt.Sprintf("image %s is used by %d workloads that have not ended (%s); wait for them or cancel them first", name, len(ids), ids[0]),
		Details: map[string]any{"image": name, "workloads": len(ids)}}
}
