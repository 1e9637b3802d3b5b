package server

import (
	"context"
	"fmt"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/node"
)

// Each sandbox has a host uid/gid range of its own (node.IDRange), held in
// the store from its create (or its start in the warm pool) until its
// runtime, disk and save are gone: terminated, or failed and cleaned up.
// An asleep sandbox keeps its range, so it wakes with the owners its saved
// files have. Sandboxes created before ranges hold none and run in
// node.LegacyIDRange.

// allocRange gives sandbox id a range, or returns the one it holds.
func (s *Server) allocRange(ctx context.Context, id string) (node.IDRange, error) {
	r, err := s.store.AllocIDRange(ctx, id, node.IDRangeFirst, node.IDRangeSize, node.IDRangeCount)
	if err != nil {
		return node.IDRange{}, fmt.Errorf("give sandbox %s a host id range: %w", id, err)
	}
	return node.IDRange{HostID: r.HostID, Size: r.Size}, nil
}

// releaseRange frees sandbox id's range once nothing of it is left on the
// node. A failure is logged: the next Recover frees the range.
func (s *Server) releaseRange(ctx context.Context, id string) {
	if err := s.store.ReleaseIDRange(ctx, id); err != nil {
		s.log.Error("release host id range", "sandbox", id, "err", err)
	}
}

// collectRanges frees, at Recover, the ranges of sandboxes that are gone:
// not in the store, terminated or failed, and with no state on the node.
func (s *Server) collectRanges(ctx context.Context) error {
	ranges, err := s.store.ListIDRanges(ctx)
	if err != nil {
		return err
	}
	known, err := s.node.Known(ctx)
	if err != nil {
		return fmt.Errorf("list node sandboxes: %w", err)
	}
	onNode := map[string]bool{}
	for _, id := range known {
		onNode[id] = true
	}
	for _, r := range ranges {
		if onNode[r.SandboxID] {
			continue
		}
		sb, err := s.store.GetSandbox(ctx, "", r.SandboxID)
		switch {
		case api.ErrorCode(err) == api.CodeNotFound:
		case err != nil:
			return err
		case !sb.State.Terminal():
			continue
		}
		s.log.Info("releasing the host id range of a sandbox that is gone", "sandbox", r.SandboxID, "host_id", r.HostID)
		s.releaseRange(ctx, r.SandboxID)
	}
	return nil
}
