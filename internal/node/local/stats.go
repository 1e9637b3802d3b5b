package local

import (
	"context"
	"time"

	"github.com/cove-dev/cove/internal/node"
	"github.com/cove-dev/cove/internal/node/runtime"
)

// StatsRuntime is the runtime's optional ability to read a sandbox's
// accounting; the node samples no CPU, memory or disk without it.
type StatsRuntime interface {
	Stats(id string) (runtime.Stats, error)
}

// NetCounters is the network's optional ability to count a sandbox's
// bytes at its interface.
type NetCounters interface {
	Counters(id string) (in, out uint64, ok bool)
}

// Stats reads the counters of the given running sandboxes. A sandbox the
// node does not run, or whose counters cannot be read, is left out of the
// answer (and logged): a sample missing is a gap, never a failure.
func (n *Node) Stats(ctx context.Context, ids []string) map[string]node.Stats {
	out := make(map[string]node.Stats, len(ids))
	sr, ok := n.rt.(StatsRuntime)
	if !ok {
		return out
	}
	nc, _ := n.cfg.Network.(NetCounters)
	for _, id := range ids {
		if ctx.Err() != nil {
			break
		}
		if _, err := n.get(id); err != nil {
			continue // not running here (any more)
		}
		st, err := sr.Stats(id)
		if err != nil {
			n.log.Debug("read sandbox stats", "sandbox", id, "err", err)
			continue
		}
		s := node.Stats{
			Time: time.Now().UTC(), CPUNanos: st.CPUNanos,
			MemoryBytes: st.MemoryBytes, MemoryPeakBytes: st.MemoryPeakBytes, DiskBytes: st.DiskBytes,
		}
		if nc != nil {
			s.NetInBytes, s.NetOutBytes, _ = nc.Counters(id)
		}
		out[id] = s
	}
	return out
}
