package open

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/store/postgres"
	"github.com/cove-dev/cove/internal/store/sqlite"
	"github.com/cove-dev/cove/internal/testsupport/pgserver"
)

func TestMain(m *testing.M) { pgserver.Main(m) }

func TestKind(t *testing.T) {
	for _, tt := range []struct {
		url, kind, path string
	}{
		{"sqlite:/var/lib/cove/cove.db", "sqlite", "/var/lib/cove/cove.db"},
		{"sqlite:///var/lib/cove/cove.db", "sqlite", "/var/lib/cove/cove.db"},
		{"sqlite:cove.db", "sqlite", "cove.db"},
		{"postgres://cove@db.internal/cove", "postgres", ""},
		{"postgresql://cove:pw@127.0.0.1:5432/cove?sslmode=disable", "postgres", ""},
	} {
		kind, path, err := Kind(tt.url)
		if err != nil || kind != tt.kind || path != tt.path {
			t.Errorf("Kind(%q) = %q, %q, %v; want %q, %q", tt.url, kind, path, err, tt.kind, tt.path)
		}
	}
}

// TestBadURL: a value naming no store is one error that names the flag
// and what it wants, and never prints a password.
func TestBadURL(t *testing.T) {
	for _, u := range []string{"", "sqlite:", "/var/lib/cove/cove.db", "mysql://root:hunter2@db/cove", "postgres//x", "file:cove.db"} {
		_, err := Open(t.Context(), u, nil)
		if !errors.Is(err, ErrBadURL) {
			t.Errorf("Open(%q) = %v; want ErrBadURL", u, err)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, "--store") || !strings.Contains(msg, "sqlite:") || strings.Contains(msg, "hunter2") {
			t.Errorf("Open(%q): error %q should name --store and sqlite:PATH, without the password", u, msg)
		}
	}
}

func TestOpenSQLite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cove.db")
	st, err := Open(t.Context(), "sqlite:"+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, ok := st.(*sqlite.DB); !ok {
		t.Errorf("sqlite: opened a %T", st)
	}
	if _, err := os.Stat(path); err != nil {
		t.Errorf("no database file: %v", err)
	}
}

func TestOpenPostgres(t *testing.T) {
	url := pgserver.Start(t).NewDatabase(t)
	st, err := Open(t.Context(), url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, ok := st.(*postgres.DB); !ok {
		t.Errorf("postgres:// opened a %T", st)
	}
	if err := st.CreateTeam(t.Context(), api.Team{ID: "team_a", Name: "a", CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
}

// TestOpenPostgresDown: a database that does not answer is an error
// naming the flag, without the URL's password.
func TestOpenPostgresDown(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, err := Open(ctx, "postgres://cove:hunter2@127.0.0.1:1/cove?connect_timeout=2", nil)
	if err == nil {
		t.Fatal("Open of a closed port succeeded")
	}
	if msg := err.Error(); !strings.Contains(msg, "--store") || strings.Contains(msg, "hunter2") {
		t.Errorf("error %q should name --store, without the password", msg)
	}
}
