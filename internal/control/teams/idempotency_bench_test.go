package teams_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/teams"
	"github.com/cove-dev/cove/internal/store/postgres"
	"github.com/cove-dev/cove/internal/store/sqlite"
	"github.com/cove-dev/cove/internal/testsupport/pgserver"
)

// TestMain stops the PostgreSQL cluster the benchmark starts.
func TestMain(m *testing.M) { pgserver.Main(m) }

// BenchmarkIdempotently measures what a key costs a request: its claim
// and its answer's completion, each a write to the store.
func BenchmarkIdempotently(b *testing.B) {
	open := map[string]func(b *testing.B) teams.Store{
		"sqlite": func(b *testing.B) teams.Store {
			st, err := sqlite.Open(b.Context(), filepath.Join(b.TempDir(), "cove.db"))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { st.Close() })
			return st
		},
		"postgres": func(b *testing.B) teams.Store {
			st, err := postgres.Open(b.Context(), pgserver.Start(b).NewDatabase(b), slog.New(slog.DiscardHandler))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { st.Close() })
			return st
		},
	}
	for _, name := range []string{"sqlite", "postgres"} {
		b.Run(name, func(b *testing.B) {
			st := open[name](b)
			if err := st.CreateTeam(b.Context(), api.Team{ID: "team_a", Name: "a", CreatedAt: time.Now()}); err != nil {
				b.Fatal(err)
			}
			s := teams.New(teams.Config{}, st, slog.New(slog.DiscardHandler), time.Now)
			do := func(context.Context) teams.Answer {
				return teams.Answer{Status: http.StatusCreated, Body: []byte(`{}`)}
			}
			i := 0
			for b.Loop() {
				i++
				if _, _, err := s.Idempotently(b.Context(), "team_a", fmt.Sprint("k", i), "h", do); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
