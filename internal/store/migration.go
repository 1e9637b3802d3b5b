package store

import (
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"
)

// Migration is one numbered schema file of a store (migrations/NNNN_name.sql).
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// LoadMigrations reads fsys's migrations/*.sql in version order: each
// name starts with a positive version number, each after the one before.
func LoadMigrations(fsys fs.FS) ([]Migration, error) {
	names, err := fs.Glob(fsys, "migrations/*.sql")
	if err != nil {
		return nil, err
	}
	// Glob sorts by name, and versions are zero-padded.
	var ms []Migration
	for _, name := range names {
		base := path.Base(name)
		prefix, _, _ := strings.Cut(base, "_")
		v, err := strconv.Atoi(prefix)
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("migration %s: name must start with a positive version number", base)
		}
		if len(ms) > 0 && v <= ms[len(ms)-1].Version {
			return nil, fmt.Errorf("migration %s: version %d is not after %d", base, v, ms[len(ms)-1].Version)
		}
		b, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, err
		}
		ms = append(ms, Migration{Version: v, Name: base, SQL: string(b)})
	}
	return ms, nil
}
