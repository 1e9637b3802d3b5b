// Package idranges keeps the sandboxes' host uid/gid ranges: each sandbox
// has a range of its own (node.IDRange), held in the store from its
// create (or its start in the warm pool) until its runtime, disk and save
// are gone: terminated, or failed and cleaned up. An asleep sandbox keeps
// its range, so it wakes with the owners its saved files have. Sandboxes
// created before ranges hold none and run in node.LegacyIDRange.
package idranges

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/node"
	"github.com/cove-dev/cove/internal/store"
)

// Store is what the ranges keep and read.
type Store interface {
	store.IDRanges
	GetSandbox(ctx context.Context, teamID, id string) (api.Sandbox, error)
}

// Node lists the sandboxes that have state on the node.
type Node interface {
	Known(ctx context.Context) ([]string, error)
}

// Ranges gives out and frees the ranges.
type Ranges struct {
	st  Store
	log *slog.Logger
}

// New returns the ranges kept in st.
func New(st Store, log *slog.Logger) *Ranges { return &Ranges{st: st, log: log} }

// Alloc gives sandbox id a range, or returns the one it holds.
func (r *Ranges) Alloc(ctx context.Context, id string) (node.IDRange, error) {
	g, err := r.st.AllocIDRange(ctx, id, node.IDRangeFirst, node.IDRangeSize, node.IDRangeCount)
	if err != nil {
		return node.IDRange{}, fmt.Errorf("give sandbox %s a host id range: %w", id, err)
	}
	return node.IDRange{HostID: g.HostID, Size: g.Size}, nil
}

// Release frees sandbox id's range once nothing of it is left on the
// node. A failure is logged: the next Collect frees the range.
func (r *Ranges) Release(ctx context.Context, id string) {
	if err := r.st.ReleaseIDRange(ctx, id); err != nil {
		r.log.Error("release host id range", "sandbox", id, "err", err)
	}
}

// Collect frees, at Recover, the ranges of sandboxes that are gone: not
// in the store, terminated or failed, and with no state on nd.
func (r *Ranges) Collect(ctx context.Context, nd Node) error {
	ranges, err := r.st.ListIDRanges(ctx)
	if err != nil {
		return err
	}
	known, err := nd.Known(ctx)
	if err != nil {
		return fmt.Errorf("list node sandboxes: %w", err)
	}
	onNode := map[string]bool{}
	for _, id := range known {
		onNode[id] = true
	}
	for _, g := range ranges {
		if onNode[g.SandboxID] {
			continue
		}
		sb, err := r.st.GetSandbox(ctx, "", g.SandboxID)
		switch {
		case api.ErrorCode(err) == api.CodeNotFound:
		case err != nil:
			return err
		case !sb.State.Terminal():
			continue
		}
		r.log.Info("releasing the host id range of a sandbox that is gone", "sandbox", g.SandboxID, "host_id", g.HostID)
		r.Release(ctx, g.SandboxID)
	}
	return nil
}
