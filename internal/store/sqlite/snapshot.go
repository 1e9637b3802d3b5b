package sqlite

import (
	"context"
	"database/sql"
	"net/url"
)

// Snapshot writes a consistent copy of the database at path to dst (a
// file that must not exist) while other processes may go on writing to
// it: the source is attached read-only to a connection of an empty
// in-memory database, so that the copy is written by a writable
// connection while the source cannot be, and `VACUUM … INTO` reads it in
// one transaction. `cove admin backup` and `cove admin migrate-store`
// read the database through it.
func Snapshot(ctx context.Context, path, dst string) error {
	db, err := sql.Open("sqlite", "file::memory:?"+url.Values{"_pragma": {"busy_timeout(10000)"}}.Encode())
	if err != nil {
		return err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	src := "file:" + (&url.URL{Path: path}).EscapedPath() + "?mode=ro"
	if _, err := conn.ExecContext(ctx, "ATTACH DATABASE ? AS src", src); err != nil {
		return err
	}
	_, err = conn.ExecContext(ctx, "VACUUM src INTO ?", dst)
	return err
}
