package server

import "github.com/cove-dev/cove/api"

// Page asks for one page of a list: at most Limit items after Cursor, the
// ID of the last item of the page before. A zero Limit is DefaultPageLimit.
type Page struct {
	Cursor string
	Limit  int
}

// Page sizes of lists.
const (
	DefaultPageLimit = 100
	MaxPageLimit     = 1000
)

func (p Page) limit() (int, error) {
	switch {
	case p.Limit == 0:
		return DefaultPageLimit, nil
	case p.Limit < 0 || p.Limit > MaxPageLimit:
		return 0, invalid("limit must be a number from 1 to %d", MaxPageLimit)
	}
	return p.Limit, nil
}

// page cuts items, read with one more than limit, to a page and names the
// cursor of the next one.
func page[T any](items []T, limit int, idOf func(T) string) api.List[T] {
	out := api.List[T]{Items: items}
	if out.Items == nil {
		out.Items = []T{}
	}
	if len(items) > limit {
		out.Items = items[:limit]
		out.NextCursor = idOf(items[limit-1])
	}
	return out
}

// scoped refuses a call that names no team. The store reads an empty team
// as every team, which only the control plane's own bookkeeping may ask
// for; a call on behalf of a caller always names the caller's team.
func scoped(teamID string) error {
	if teamID == "" {
		return api.Errorf(api.CodeInternal, "a team-scoped call was made without a team")
	}
	return nil
}
