package events_test

import (
	"context"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/events"
	"github.com/cove-dev/cove/internal/control/page"
	"github.com/cove-dev/cove/internal/store/sqlite"
)

// core is the fake of the core: sandboxes by ID from the store, and the
// change broadcast, counted.
type core struct {
	st *sqlite.DB

	mu       sync.Mutex
	notified int
}

func (c *core) GetSandbox(ctx context.Context, teamID, ref string) (api.Sandbox, error) {
	return c.st.GetSandbox(ctx, teamID, ref)
}

func (c *core) Notify() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.notified++
}

func (c *core) Changes() <-chan struct{} { return make(chan struct{}) }

func (c *core) Event(api.Event) {}

// newLog stores team_a with sbx_a and team_b with sbx_b in SQLite and
// returns the event log over it, keeping events for an hour.
func newLog(t *testing.T) (*events.Log, *core) {
	t.Helper()
	ctx := t.Context()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "cove.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	now := time.Now().UTC()
	for _, x := range []string{"a", "b"} {
		if err := st.CreateTeam(ctx, api.Team{ID: "team_" + x, Name: x, CreatedAt: now}); err != nil {
			t.Fatal(err)
		}
		if err := st.CreateSandbox(ctx, api.Sandbox{ID: "sbx_" + x, TeamID: "team_" + x, Template: "managed", State: api.StateRunning,
			Labels: map[string]string{}, BudgetAlerts: []float64{}, CreatedAt: now}); err != nil {
			t.Fatal(err)
		}
	}
	c := &core{st: st}
	return events.New(events.Config{Retention: time.Hour}, st, c, c, c, slog.New(slog.DiscardHandler), func() time.Time { return time.Now().UTC() }), c
}

// TestListByCursor: a team's events are paged by cursor, oldest first,
// and hold none of another team's; a sandbox filter finds the team's own
// sandbox only; a call without a team is refused.
func TestListByCursor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, _ := newLog(t)
		ctx := t.Context()
		for i := range 5 {
			l.Emit(ctx, "team_a", "a.step", "sbx_a", "", map[string]any{"i": i})
			l.Emit(ctx, "team_b", "b.step", "sbx_b", "", nil)
		}
		l.Emit(ctx, "team_a", "a.other", "", "", nil)

		tests := []struct {
			name  string
			team  string
			q     events.Query
			pages [][]string
			code  api.Code
		}{
			{"team a by twos", "team_a", events.Query{Page: page.Page{Limit: 2}},
				[][]string{{"a.step", "a.step"}, {"a.step", "a.step"}, {"a.step", "a.other"}}, ""},
			{"team a, one type", "team_a", events.Query{Types: []string{"a.other"}}, [][]string{{"a.other"}}, ""},
			{"team a's sandbox", "team_a", events.Query{Sandbox: "sbx_a", Page: page.Page{Limit: 5}}, [][]string{{"a.step", "a.step", "a.step", "a.step", "a.step"}}, ""},
			{"team b", "team_b", events.Query{}, [][]string{{"b.step", "b.step", "b.step", "b.step", "b.step"}}, ""},
			{"another team's sandbox", "team_a", events.Query{Sandbox: "sbx_b"}, nil, api.CodeNotFound},
			{"no team", "", events.Query{}, nil, api.CodeInternal},
		}
		for _, tt := range tests {
			q := tt.q
			var got [][]string
			var lastID string
			for {
				list, err := l.ListEvents(ctx, tt.team, q)
				if err != nil {
					if api.ErrorCode(err) != tt.code {
						t.Errorf("%s: err = %v, want %s", tt.name, err, tt.code)
					}
					break
				}
				var types []string
				for _, e := range list.Items {
					types = append(types, e.Type)
					if e.ID <= lastID {
						t.Errorf("%s: event %s after %s: not oldest first", tt.name, e.ID, lastID)
					}
					lastID = e.ID
				}
				got = append(got, types)
				if list.NextCursor == "" {
					break
				}
				q.Cursor = list.NextCursor
			}
			if tt.code != "" {
				continue
			}
			if len(got) != len(tt.pages) {
				t.Errorf("%s: pages = %v, want %v", tt.name, got, tt.pages)
				continue
			}
			for i := range got {
				if len(got[i]) != len(tt.pages[i]) {
					t.Errorf("%s: page %d = %v, want %v", tt.name, i, got[i], tt.pages[i])
					continue
				}
				for j := range got[i] {
					if got[i][j] != tt.pages[i][j] {
						t.Errorf("%s: page %d = %v, want %v", tt.name, i, got[i], tt.pages[i])
						break
					}
				}
			}
		}
	})
}

// TestExpire: events older than the retention are dropped, younger ones
// kept.
func TestExpire(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, _ := newLog(t)
		ctx := t.Context()
		l.Emit(ctx, "team_a", "old", "", "", nil)
		time.Sleep(50 * time.Minute)
		l.Emit(ctx, "team_a", "younger", "", "", nil)
		time.Sleep(20 * time.Minute) // old is 70 min old, younger 20
		l.Expire(ctx)
		list, err := l.ListEvents(ctx, "team_a", events.Query{})
		if err != nil {
			t.Fatal(err)
		}
		if len(list.Items) != 1 || list.Items[0].Type != "younger" {
			t.Errorf("events after expiry = %+v, want only younger", list.Items)
		}
	})
}

// TestEmitWakes: Emit wakes the waiters; Record does not, until Notify.
func TestEmitWakes(t *testing.T) {
	l, c := newLog(t)
	ctx := t.Context()
	l.Record(ctx, "team_a", "a", "", "", nil)
	l.Record(ctx, "team_a", "b", "", "", nil)
	if c.notified != 0 {
		t.Errorf("Record woke the waiters %d times", c.notified)
	}
	l.Notify()
	l.Emit(ctx, "team_a", "c", "", "", nil)
	if c.notified != 2 {
		t.Errorf("waiters woken %d times, want 2 (Notify, Emit)", c.notified)
	}
}
