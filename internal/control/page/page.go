// Package page is how the control plane's services page their lists: a
// Page asks for at most Limit items after Cursor, and Cut turns the items
// read into an api.List naming the next cursor. It is shared by the
// feature services so that every list pages alike.
package page

import "github.com/cove-dev/cove/api"

// Page asks for one page of a list: at most Limit items after Cursor, the
// ID of the last item of the page before. A zero Limit is DefaultLimit.
type Page struct {
	Cursor string
	Limit  int
}

// Page sizes of lists.
const (
	DefaultLimit = 100
	MaxLimit     = 1000
)

// Size is the number of items the page holds, checked.
func (p Page) Size() (int, error) {
	switch {
	case p.Limit == 0:
		return DefaultLimit, nil
	case p.Limit < 0 || p.Limit > MaxLimit:
		return 0, api.Errorf(api.CodeInvalidArgument, "limit must be a number from 1 to %d", MaxLimit)
	}
	return p.Limit, nil
}

// Cut cuts items, read with one more than limit, to a page and names the
// cursor of the next one.
func Cut[T any](items []T, limit int, idOf func(T) string) api.List[T] {
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

// Scoped refuses a call that names no team. The store reads an empty team
// as every team, which only the control plane's own bookkeeping may ask
// for; a call on behalf of a caller always names the caller's team.
func Scoped(teamID string) error {
	if teamID == "" {
		return api.Errorf(api.CodeInternal, "a team-scoped call was made without a team")
	}
	return nil
}
