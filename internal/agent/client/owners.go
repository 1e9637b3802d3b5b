package client

import (
	"context"
	"fmt"
	"net/http"

	"github.com/cove-dev/cove/internal/agent/wire"
)

// SocketOwners asks which commands hold the given sockets of the sandbox:
// the answer's i-th ID is the command holding socks[i], "" when the agent
// found none. The agent is not trusted here either: an answer of the wrong
// length or with a malformed ID is an error; whether an ID is one of this
// sandbox's commands is the caller's to check.
func (c *Client) SocketOwners(ctx context.Context, socks []wire.Socket) ([]string, error) {
	if len(socks) > wire.MaxOwnerSockets {
		return nil, fmt.Errorf("socket owners: %d sockets; at most %d per call", len(socks), wire.MaxOwnerSockets)
	}
	var a wire.OwnersAnswer
	if err := c.call(ctx, http.MethodPost, "/v1/sockets/owners", wire.OwnersRequest{Sockets: socks}, &a); err != nil {
		return nil, fmt.Errorf("socket owners: %w", err)
	}
	if len(a.Commands) != len(socks) {
		return nil, fmt.Errorf("socket owners: agent answered %d owners for %d sockets", len(a.Commands), len(socks))
	}
	for _, id := range a.Commands {
		if id != "" && !wire.ValidID(id) {
			return nil, fmt.Errorf("socket owners: agent answered a malformed command ID %q", id)
		}
	}
	return a.Commands, nil
}
