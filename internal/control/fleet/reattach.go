package fleet

import (
	"context"
	"sync"
	"time"

	"github.com/cove-dev/cove/api"
)

// reattachJob is one registration's sandboxes to resume on the node: a
// node process that started again records its sandboxes' commands and
// reconnects their network only once the core attaches them.
type reattachJob struct {
	nodeID  string
	epoch   int64
	sandbox []string
}

// queueReattachLocked asks Run to reattach the sandboxes assigned to a
// node that just registered. f.mu is held.
func (f *Fleet) queueReattachLocked(nodeID string, epoch int64, ids []string) {
	if len(ids) == 0 {
		return
	}
	f.pending = append(f.pending, reattachJob{nodeID: nodeID, epoch: epoch, sandbox: ids})
	select {
	case f.kick <- struct{}{}:
	default:
	}
}

// reattachPending runs every queued job in a goroutine of wg.
func (f *Fleet) reattachPending(ctx context.Context, wg *sync.WaitGroup) {
	f.mu.Lock()
	jobs := f.pending
	f.pending = nil
	f.mu.Unlock()
	for _, j := range jobs {
		wg.Go(func() { f.reattach(ctx, j) })
	}
}

// reattach resumes each sandbox of the job through the core. The node
// registers before its API serves, so an unavailable node is asked again
// until it answers, registers anew (a later job takes over) or is lost.
func (f *Fleet) reattach(ctx context.Context, j reattachJob) {
	f.mu.Lock()
	s := f.sandboxes
	f.mu.Unlock()
	if s == nil {
		return
	}
	deadline := time.Now().Add(2 * f.cfg.LostAfter)
	for _, id := range j.sandbox {
		for {
			if !f.inEpoch(j.nodeID, j.epoch) || ctx.Err() != nil {
				return
			}
			err := s.Reattach(ctx, id)
			if err == nil {
				break
			}
			if api.ErrorCode(err) != api.CodeUnavailable || time.Now().After(deadline) {
				f.log.Warn("reattach a sandbox on its node", "sandbox", id, "node", j.nodeID, "err", err)
				break
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
}

// inEpoch reports that the node is connected in that epoch still.
func (f *Fleet) inEpoch(nodeID string, epoch int64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	m := f.nodes[nodeID]
	return m != nil && m.connected() && m.row.Epoch == epoch
}
