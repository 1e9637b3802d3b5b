package nodetest

import (
	"context"

	"github.com/cove-dev/cove/internal/node"
)

// SetStats sets the counters Stats reports for a running sandbox.
func (n *Node) SetStats(id string, st node.Stats) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.stats == nil {
		n.stats = map[string]node.Stats{}
	}
	n.stats[id] = st
}

// Stats reports the counters set by SetStats of the running sandboxes
// among ids.
func (n *Node) Stats(ctx context.Context, ids []string) map[string]node.Stats {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := map[string]node.Stats{}
	for _, id := range ids {
		if st, ok := n.stats[id]; ok {
			if s, ok := n.sandboxes[id]; ok && s.State == Running {
				out[id] = st
			}
		}
	}
	return out
}

// SetFile puts a file into a running sandbox's files (a save counts them).
func (n *Node) SetFile(id, path string, b []byte) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if s, ok := n.sandboxes[id]; ok {
		if s.Files == nil {
			s.Files = map[string][]byte{}
		}
		s.Files[path] = b
	}
}

// SetGPUs sets the GPUs the node advertises.
func (n *Node) SetGPUs(g node.GPUs) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.gpus = g
}

// GPUs implements workloads' node: the GPUs set by SetGPUs.
func (n *Node) GPUs() node.GPUs {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.gpus
}
