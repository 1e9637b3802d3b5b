package local

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"syscall"
	"time"

	"github.com/cove-dev/cove/api"
)

// dialPortTimeout bounds connecting to a sandbox's published port.
const dialPortTimeout = 10 * time.Second

// Publish makes ports the only ports of the sandbox that the node may
// connect to (the fence drops every other connection into it).
func (n *Node) Publish(ctx context.Context, id string, ports []int) error {
	if n.cfg.Network == nil {
		return nil
	}
	ps := make([]uint16, 0, len(ports))
	for _, p := range ports {
		if p < 1 || p > 65535 {
			return api.Errorf(api.CodeInvalidArgument, "port %d is not a TCP port", p)
		}
		ps = append(ps, uint16(p))
	}
	return n.cfg.Network.Publish(ctx, id, ps)
}

// PublishPort adds one port to those of the sandbox the node may connect
// to.
func (n *Node) PublishPort(ctx context.Context, id string, port int) error {
	if n.cfg.Network == nil {
		return nil
	}
	if port < 1 || port > 65535 {
		return api.Errorf(api.CodeInvalidArgument, "port %d is not a TCP port", port)
	}
	return n.cfg.Network.PublishPort(ctx, id, uint16(port))
}

// UnpublishPort takes one port away from those of the sandbox the node
// may connect to.
func (n *Node) UnpublishPort(ctx context.Context, id string, port int) error {
	if n.cfg.Network == nil {
		return nil
	}
	if port < 1 || port > 65535 {
		return api.Errorf(api.CodeInvalidArgument, "port %d is not a TCP port", port)
	}
	return n.cfg.Network.UnpublishPort(ctx, id, uint16(port))
}

func (n *Node) unpublish(ctx context.Context, id string) {
	if n.cfg.Network == nil {
		return
	}
	if err := n.cfg.Network.Publish(context.WithoutCancel(ctx), id, nil); err != nil {
		n.log.Error("unpublish ports", "sandbox", id, "err", err)
	}
}

// DialPort connects to a published port of a running sandbox, at its
// address on the node.
func (n *Node) DialPort(ctx context.Context, id string, port int) (net.Conn, error) {
	if _, err := n.get(id); err != nil {
		return nil, err
	}
	if n.cfg.Network == nil {
		return nil, api.Errorf(api.CodeUnavailable, "sandboxes on this node have no network (cove serve --no-network), so their ports cannot be reached")
	}
	addr, ok := n.cfg.Network.Addr(id)
	if !ok {
		return nil, api.Errorf(api.CodeUnavailable, "sandbox %s has no network link on this node", id)
	}
	d := net.Dialer{Timeout: dialPortTimeout}
	c, err := d.DialContext(ctx, "tcp4", netip.AddrPortFrom(addr, uint16(port)).String())
	if err != nil {
		return nil, api.Errorf(api.CodeUnavailable, "nothing answers on port %d of sandbox %s: start a server there that listens on 0.0.0.0:%d (%s)", port, id, port, dialReason(err))
	}
	return c, nil
}

// dialReason says why a dial failed without the node's addresses.
func dialReason(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.As(err, &ne) && ne.Timeout():
		return "the connection timed out"
	}
	return "could not connect"
}
