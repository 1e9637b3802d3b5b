package cove

import (
	"context"
	"net/http"

	"github.com/cove-dev/cove/api"
)

// CreateTicket asks for a ticket that authenticates one request to path
// (an attach), once, within a minute: for clients that cannot send an
// Authorization header, such as a browser's WebSocket. The request then
// carries ?ticket=T instead.
func (c *Client) CreateTicket(ctx context.Context, path string) (api.Ticket, error) {
	var t api.Ticket
	err := c.do(ctx, http.MethodPost, "/v1/tickets", nil, api.CreateTicketRequest{Path: path}, &t)
	return t, err
}
