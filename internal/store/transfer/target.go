package transfer

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cove-dev/cove/api"
)

// pgTables lists the tables of the target's current schema among names.
func pgTables(ctx context.Context, q querier, names []string) ([]string, error) {
	rows, err := q.Query(ctx, `SELECT table_name FROM information_schema.tables
		WHERE table_schema = current_schema() AND table_name = ANY($1) ORDER BY table_name`, names)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// allPgTables lists every table of the target's current schema.
func allPgTables(ctx context.Context, q querier) ([]string, error) {
	rows, err := q.Query(ctx, `SELECT table_name FROM information_schema.tables
		WHERE table_schema = current_schema() AND table_type = 'BASE TABLE' ORDER BY table_name`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// querier is a connection or a transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// refuseNonEmpty refuses a target that holds any of cove's tables,
// before anything is written to it: a store already in use is never
// mixed with a moved one. It returns the tables the target holds (none
// of cove's), which a failed move leaves in place.
func refuseNonEmpty(ctx context.Context, url string, tables []string) ([]string, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("--to: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	found, err := pgTables(ctx, conn, append([]string{"schema_migrations"}, tables...))
	if err != nil {
		return nil, fmt.Errorf("--to: list its tables: %w", err)
	}
	if len(found) > 0 {
		return nil, api.Errorf(api.CodePreconditionFailed,
			"--to: the database already holds cove's tables (%s); it was left untouched: give an empty database", strings.Join(found, ", "))
	}
	return allPgTables(ctx, conn)
}

// targetColumns lists the columns of a target table that take values
// (generated columns compute their own).
func targetColumns(ctx context.Context, q querier, table string) (map[string]column, error) {
	rows, err := q.Query(ctx, `SELECT column_name, data_type, udt_name FROM information_schema.columns
		WHERE table_schema = current_schema() AND table_name = $1 AND is_generated = 'NEVER'`, table)
	if err != nil {
		return nil, err
	}
	cols, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (column, error) {
		var c column
		err := r.Scan(&c.name, &c.dataType, &c.udt)
		return c, err
	})
	if err != nil {
		return nil, err
	}
	m := map[string]column{}
	for _, c := range cols {
		m[c.name] = c
	}
	return m, nil
}

// copyTable copies every row of a source table into the target table of
// the same name, converting each value to its column's type, and returns
// how many it copied.
func copyTable(ctx context.Context, tx pgx.Tx, src *source, table string) (int64, error) {
	target, err := targetColumns(ctx, tx, table)
	if err != nil {
		return 0, fmt.Errorf("columns of %s in the target: %w", table, err)
	}
	if len(target) == 0 {
		return 0, fmt.Errorf("the target has no table %s: its schema is not this cove's", table)
	}
	names := src.columns[table]
	cols := make([]column, len(names))
	quoted := make([]string, len(names))
	for i, n := range names {
		c, ok := target[n]
		if !ok {
			return 0, fmt.Errorf("the target's table %s has no column %s: its schema is not this cove's", table, n)
		}
		cols[i] = c
		quoted[i] = `"` + n + `"`
	}
	rows, err := src.db.QueryContext(ctx, "SELECT "+strings.Join(quoted, ", ")+` FROM "`+table+`"`)
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", table, err)
	}
	defer rows.Close()
	var n int64
	raw := make([]any, len(cols))
	ptrs := make([]any, len(cols))
	for i := range raw {
		ptrs[i] = &raw[i]
	}
	next := func() ([]any, error) {
		if !rows.Next() {
			return nil, rows.Err()
		}
		n++
		if err := rows.Scan(ptrs...); err != nil {
			return nil, err
		}
		out := make([]any, len(cols))
		for i, c := range cols {
			v, err := convert(c, raw[i])
			if err != nil {
				// The first column is the row's key in most tables.
				return nil, fmt.Errorf("row %d (%s %v), column %s: %w", n, cols[0].name, raw[0], c.name, err)
			}
			out[i] = v
		}
		return out, nil
	}
	copied, err := tx.CopyFrom(ctx, pgx.Identifier{table}, names, pgx.CopyFromFunc(next))
	if err != nil {
		return 0, fmt.Errorf("copy %s: %w", table, err)
	}
	return copied, nil
}

// placement is the row that makes a moved asleep sandbox wake from its
// moved save, on whichever node has room.
type placement struct {
	sandboxID string
	resources string
	save      string
	bytes     int64
	savedAt   time.Time
}

// putPlacement stores the placement of an asleep sandbox: placed on no
// node, its save written by none of the fleet's (SaveNodeID "").
func putPlacement(ctx context.Context, tx pgx.Tx, p placement) error {
	target, err := targetColumns(ctx, tx, "placements")
	if err != nil {
		return err
	}
	res, err := convert(target["resources"], p.resources)
	if err != nil {
		return fmt.Errorf("placement of %s: resources: %w", p.sandboxID, err)
	}
	if _, ok := res.(json.RawMessage); !ok && target["resources"].dataType != "text" {
		return fmt.Errorf("placement of %s: resources are of type %s", p.sandboxID, target["resources"].dataType)
	}
	_, err = tx.Exec(ctx, `INSERT INTO placements (sandbox_id, node_id, epoch, resources, save, save_node_id, save_bytes, saved_at)
		VALUES ($1, '', 0, $2, $3, '', $4, $5)`, p.sandboxID, res, p.save, p.bytes, p.savedAt.UTC())
	if err != nil {
		return fmt.Errorf("placement of %s: %w", p.sandboxID, err)
	}
	return nil
}

// resetSequences moves every sequence behind a target column past the
// largest key copied and past the source's own counter, so that new rows
// never take a key an old row had.
func resetSequences(ctx context.Context, tx pgx.Tx, counters map[string]int64) error {
	rows, err := tx.Query(ctx, `SELECT table_name, column_name, pg_get_serial_sequence(quote_ident(table_name), column_name)
		FROM information_schema.columns
		WHERE table_schema = current_schema() AND pg_get_serial_sequence(quote_ident(table_name), column_name) IS NOT NULL`)
	if err != nil {
		return err
	}
	type seq struct{ table, column, name string }
	seqs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (seq, error) {
		var s seq
		err := r.Scan(&s.table, &s.column, &s.name)
		return s, err
	})
	if err != nil {
		return err
	}
	for _, s := range seqs {
		var largest int64
		q := fmt.Sprintf(`SELECT COALESCE(max(%s), 0) FROM %s`, pgx.Identifier{s.column}.Sanitize(), pgx.Identifier{s.table}.Sanitize())
		if err := tx.QueryRow(ctx, q).Scan(&largest); err != nil {
			return fmt.Errorf("largest %s of %s: %w", s.column, s.table, err)
		}
		largest = max(largest, counters[s.table])
		if largest == 0 {
			continue
		}
		if _, err := tx.Exec(ctx, "SELECT setval(CAST($1::text AS regclass), $2)", s.name, largest); err != nil {
			return fmt.Errorf("sequence %s: %w", s.name, err)
		}
	}
	return nil
}

// dropTables removes tables the failed move created itself, so that the
// target is left as it was found and the move can be run again.
func dropTables(ctx context.Context, conn querier, tables []string) error {
	if len(tables) == 0 {
		return nil
	}
	ids := make([]string, len(tables))
	for i, t := range tables {
		ids[i] = pgx.Identifier{t}.Sanitize()
	}
	_, err := conn.Exec(ctx, "DROP TABLE IF EXISTS "+strings.Join(ids, ", ")+" CASCADE")
	return err
}
