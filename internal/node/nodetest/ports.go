package nodetest

import (
	"context"
	"net"
	"slices"

	"github.com/cove-dev/cove/api"
)

// Publish implements lifecycle.Node: it remembers the ports.
func (n *Node) Publish(ctx context.Context, id string, ports []int) error {
	if err := n.record("publish", id); err != nil {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.published == nil {
		n.published = map[string][]int{}
	}
	if len(ports) == 0 {
		delete(n.published, id)
	} else {
		n.published[id] = slices.Clone(ports)
	}
	return nil
}

// PublishPort implements lifecycle.Node: it adds one port.
func (n *Node) PublishPort(ctx context.Context, id string, port int) error {
	if err := n.record("publish-port", id); err != nil {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.published == nil {
		n.published = map[string][]int{}
	}
	if !slices.Contains(n.published[id], port) {
		n.published[id] = append(n.published[id], port)
	}
	return nil
}

// UnpublishPort implements lifecycle.Node: it takes one port away.
func (n *Node) UnpublishPort(ctx context.Context, id string, port int) error {
	if err := n.record("unpublish-port", id); err != nil {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.published[id] = slices.DeleteFunc(n.published[id], func(p int) bool { return p == port })
	if len(n.published[id]) == 0 {
		delete(n.published, id)
	}
	return nil
}

// Published returns the ports a sandbox publishes.
func (n *Node) Published(id string) []int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.published[id])
}

// DialPort implements lifecycle.Node: a running sandbox's published port is
// PortAddr's address.
func (n *Node) DialPort(ctx context.Context, id string, port int) (net.Conn, error) {
	n.mu.Lock()
	_, err := n.running(id)
	ok := slices.Contains(n.published[id], port)
	n.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if !ok || n.PortAddr == nil {
		return nil, api.Errorf(api.CodeUnavailable, "nothing answers on port %d of sandbox %s", port, id)
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", n.PortAddr(id, port))
}
