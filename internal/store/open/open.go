// Package open opens the store a --store URL names: sqlite:PATH (one
// file, one process) or postgres://… (shared by control plane replicas).
// It is the one place that knows every store implementation.
package open

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"

	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/internal/store/postgres"
	"github.com/cove-dev/cove/internal/store/sqlite"
)

// ErrBadURL is wrapped by the error of a --store value that names no
// store.
var ErrBadURL = errors.New("invalid --store")

// Kind says which store url names, "sqlite" or "postgres", and for
// sqlite its file; a URL that names neither is an ErrBadURL.
func Kind(u string) (kind, path string, err error) {
	switch {
	case strings.HasPrefix(u, "sqlite:"):
		path = strings.TrimPrefix(u, "sqlite:")
		// sqlite:///var/lib/cove/cove.db is the URL form of the path.
		if strings.HasPrefix(path, "//") {
			path = strings.TrimPrefix(path, "//")
		}
		if path == "" {
			return "", "", fmt.Errorf("%w %q: sqlite: needs the database file's path, as in sqlite:/var/lib/cove/cove.db", ErrBadURL, u)
		}
		return "sqlite", path, nil
	case strings.HasPrefix(u, "postgres://"), strings.HasPrefix(u, "postgresql://"):
		return "postgres", "", nil
	}
	return "", "", fmt.Errorf("%w %q: want sqlite:PATH or postgres://USER@HOST/DATABASE", ErrBadURL, redact(u))
}

// Open opens (creating and migrating as needed) the store url names.
func Open(ctx context.Context, u string, log *slog.Logger) (store.Store, error) {
	kind, path, err := Kind(u)
	if err != nil {
		return nil, err
	}
	if kind == "sqlite" {
		return sqlite.Open(ctx, path)
	}
	db, err := postgres.Open(ctx, u, log)
	if err != nil {
		return nil, fmt.Errorf("--store %s: %w", redact(u), err)
	}
	return db, nil
}

// redact hides the password of a URL that has one, so that an error
// naming the flag's value does not print it.
func redact(u string) string {
	p, err := url.Parse(u)
	if err != nil || p.User == nil {
		if strings.Contains(u, "@") {
			return "(a URL with credentials)"
		}
		return u
	}
	return p.Redacted()
}
