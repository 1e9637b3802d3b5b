package lifecycle

import (
	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/page"
)

// Page asks for one page of a list: at most Limit items after Cursor, the
// ID of the last item of the page before. A zero Limit is DefaultPageLimit.
// Every service pages alike (internal/control/page).
type Page = page.Page

// Page sizes of lists.
const (
	DefaultPageLimit = page.DefaultLimit
	MaxPageLimit     = page.MaxLimit
)

// cut cuts items, read with one more than limit, to a page and names the
// cursor of the next one.
func cut[T any](items []T, limit int, idOf func(T) string) api.List[T] {
	return page.Cut(items, limit, idOf)
}

// scoped refuses a call that names no team. The store reads an empty team
// as every team, which only the control plane's own bookkeeping may ask
// for; a call on behalf of a caller always names the caller's team.
func scoped(teamID string) error { return page.Scoped(teamID) }
