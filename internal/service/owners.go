package service

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/cove-dev/cove/internal/agent/wire"
	"github.com/cove-dev/cove/internal/netpolicy"
	"github.com/cove-dev/cove/internal/node/local"
)

// socketOwners asks the node which command holds a sandbox socket, for the
// gateway's owner lookups. The network starts before the node (the node
// is given the network), so the node is set once it exists.
type socketOwners struct {
	node atomic.Pointer[local.Node]
}

func (o *socketOwners) lookup(ctx context.Context, sandboxID string, socks []netpolicy.Socket) ([]string, error) {
	nd := o.node.Load()
	if nd == nil {
		return nil, errors.New("the node is not up yet")
	}
	ws := make([]wire.Socket, len(socks))
	for i, s := range socks {
		ws[i] = wire.Socket{Proto: s.Proto, Local: s.Local.String()}
		if s.Remote.IsValid() {
			ws[i].Remote = s.Remote.String()
		}
	}
	return nd.SocketOwners(ctx, sandboxID, ws)
}
