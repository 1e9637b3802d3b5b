package httpapi

import (
	"crypto/rand"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/lifecycle"
)

// Tickets let a browser attach to a command: a WebSocket cannot carry an
// Authorization header, so the page asks for a ticket with its key
// (POST /v1/tickets) and opens the socket with ?ticket=. A ticket is bound
// to one path, used once, and lives ticketTTL. It holds the key it was
// issued under, so a key revoked in between revokes its tickets too. They
// live in this process's memory: a restart forgets them, and a fleet
// routes a ticket's use to the process that issued it.

const (
	ticketTTL      = 60 * time.Second
	maxTicketsTeam = 100
)

// ticketPaths are the requests a ticket may authenticate.
var ticketPaths = regexp.MustCompile(`^/v1/sandboxes/([^/]+)/commands/([^/]+)/attach$`)

type ticket struct {
	key     string
	teamID  string
	path    string
	expires time.Time
}

type ticketBook struct {
	mu  sync.Mutex
	now func() time.Time
	m   map[string]ticket
}

func newTicketBook() *ticketBook {
	return &ticketBook{now: time.Now, m: map[string]ticket{}}
}

// issue records a ticket, after dropping expired ones; a team holds at
// most maxTicketsTeam at once.
func (b *ticketBook) issue(key, teamID, path string) (api.Ticket, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	n := 0
	for id, t := range b.m {
		switch {
		case !now.Before(t.expires):
			delete(b.m, id)
		case t.teamID == teamID:
			n++
		}
	}
	if n >= maxTicketsTeam {
		return api.Ticket{}, api.Errorf(api.CodeResourceExhausted, "this team holds %d unused tickets; use them or wait %s for them to expire", n, ticketTTL)
	}
	id := "tkt_" + rand.Text()
	t := ticket{key: key, teamID: teamID, path: path, expires: now.Add(ticketTTL)}
	b.m[id] = t
	return api.Ticket{Ticket: id, Path: path, ExpiresAt: t.expires.UTC()}, nil
}

// use takes a ticket for path: it is gone after this, whatever the answer.
func (b *ticketBook) use(id, path string) (key string, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	t, found := b.m[id]
	delete(b.m, id)
	if !found || t.path != path || !b.now().Before(t.expires) {
		return "", false
	}
	return t.key, true
}

func (h commandRoutes) createTicket(w http.ResponseWriter, r *http.Request, p lifecycle.Principal) error {
	var req api.CreateTicketRequest
	if err := decode(r, &req, false); err != nil {
		return err
	}
	m := ticketPaths.FindStringSubmatch(req.Path)
	if m == nil {
		return api.Errorf(api.CodeInvalidArgument, "path %q: a ticket is for one attach, /v1/sandboxes/{ref}/commands/{id}/attach", req.Path)
	}
	// The command must be the team's: a ticket never names what its key
	// could not reach.
	if _, err := h.Commands.GetCommand(r.Context(), p.Team.ID, m[1], m[2]); err != nil {
		return err
	}
	key, _ := bearerKey(r)
	t, err := h.tickets.issue(key, p.Team.ID, req.Path)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusCreated, t)
}

// authenticateTicket authenticates a request by its Authorization header,
// or else by a ticket issued for its path.
func (h *shared) authenticateTicket(r *http.Request) (lifecycle.Principal, error) {
	id := r.URL.Query().Get("ticket")
	if _, ok := bearerKey(r); ok || id == "" {
		return h.authenticate(r)
	}
	key, ok := h.tickets.use(id, r.URL.Path)
	if !ok || !strings.HasPrefix(id, "tkt_") {
		return lifecycle.Principal{}, api.Errorf(api.CodeUnauthenticated, "the ticket is not valid: it was used already, expired after %s, or is for another path; ask for a new one with POST /v1/tickets", ticketTTL)
	}
	return h.Teams.Authenticate(r.Context(), key)
}
