package api

import "time"

// CreateTicketRequest is the body of POST /v1/tickets: the path of the one
// request the ticket may authenticate, e.g.
// /v1/sandboxes/sbx_…/commands/cmd_…/attach.
type CreateTicketRequest struct {
	// the one request the ticket authenticates:
	// /v1/sandboxes/{ref}/commands/{id}/attach
	Path string `json:"path"`
}

// Ticket authenticates one request, once, before expires_at, in place of
// the Authorization header: ?ticket=T. Browsers cannot set headers on a
// WebSocket, so they attach with a ticket.
type Ticket struct {
	// tkt_…; pass as ?ticket=
	Ticket    string    `json:"ticket"`
	Path      string    `json:"path"`
	ExpiresAt time.Time `json:"expires_at"`
}
