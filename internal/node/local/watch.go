package local

import (
	"context"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/agent/client"
	"github.com/cove-dev/cove/internal/node"
	"github.com/cove-dev/cove/internal/node/watch"
)

// WatchFiles reads the journal of a directory's events (internal/node/
// watch), which one watch of the sandbox's agent feeds, whoever reads it:
// the API's watches and the E2B listener's alike.
func (n *Node) WatchFiles(ctx context.Context, sandboxID string, spec node.WatchSpec) (node.FileWatch, error) {
	if _, err := n.agentOf(sandboxID); err != nil {
		return nil, err
	}
	return n.watches.Watch(ctx, sandboxID, spec)
}

// openWatch starts a watch of a sandbox's agent for a journal. It lives
// past the call that asked for it: its context is the node's.
func (n *Node) openWatch(ctx context.Context, sandboxID, path string, recursive bool) (watch.Source, error) {
	c, err := n.agentOf(sandboxID)
	if err != nil {
		return nil, err
	}
	// The watch outlives the request that opened it, so it runs under
	// the node's context; the request's ends only the wait for it.
	wctx, cancel := context.WithCancel(n.ctx)
	stop := context.AfterFunc(ctx, cancel)
	w, err := c.WatchFiles(wctx, path, recursive)
	if !stop() && err == nil {
		w.Close()
		err = ctx.Err()
	}
	if err != nil {
		cancel()
		return nil, err
	}
	return &agentSource{w: w, cancel: cancel}, nil
}

// agentSource is an agent's watch as a journal's source.
type agentSource struct {
	w      *client.FileWatch
	cancel context.CancelFunc
}

func (s *agentSource) Next() (api.FileEvent, error) {
	ev, err := s.w.Next()
	if err != nil {
		return api.FileEvent{}, err
	}
	out := api.FileEvent{Type: api.FileEventType(ev.Type), Path: ev.Path, Count: ev.Count}
	if ev.Entry != nil {
		e := Entry(*ev.Entry)
		out.Entry = &e
	}
	return out, nil
}

func (s *agentSource) Close() error {
	s.cancel()
	return s.w.Close()
}
