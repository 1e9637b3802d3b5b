package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/store"
)

const eventPrefix = "evt_"

// eventID makes an event's ID from its sequence number: fixed width, so
// IDs sort as their numbers do.
func eventID(seq int64) string { return fmt.Sprintf("%s%020d", eventPrefix, seq) }

func eventSeq(id string) (int64, bool) {
	n, err := strconv.ParseInt(strings.TrimPrefix(id, eventPrefix), 10, 64)
	return n, err == nil && strings.HasPrefix(id, eventPrefix) && n >= 0
}

// AppendEvent adds an event to a team's log.
func (db *DB) AppendEvent(ctx context.Context, teamID string, e api.Event) (api.Event, error) {
	data, err := eventData(&e)
	if err != nil {
		return e, err
	}
	db.write.prepare(ctx, insertEventSQL, webhooksOfTeamSQL, insertDeliverySQL)
	tx, err := db.write.BeginTx(ctx, nil)
	if err != nil {
		return e, fmt.Errorf("append event: %w", err)
	}
	defer tx.Rollback()
	if e, err = db.appendEvent(ctx, tx, teamID, e, data); err != nil {
		return e, err
	}
	if err := tx.Commit(); err != nil {
		return e, fmt.Errorf("append event: %w", err)
	}
	return e, nil
}

// eventData gives e its empty data when it has none and encodes it.
func eventData(e *api.Event) (string, error) {
	if e.Data == nil {
		e.Data = map[string]any{}
	}
	return encodeJSON(e.Data)
}

// appendEvent adds an event (its data already encoded) to a team's log in
// tx, with its webhook deliveries: an event is never stored without them.
// It returns the event as stored, with its ID. The caller prepared the
// kept statements (insertEventSQL, webhooksOfTeamSQL, insertDeliverySQL).
func (db *DB) appendEvent(ctx context.Context, tx *sql.Tx, teamID string, e api.Event, data string) (api.Event, error) {
	kept := db.write.kept(tx)
	seq, err := insertEvent(ctx, kept, teamID, e, data)
	if err != nil {
		return e, err
	}
	n, err := enqueueDeliveries(ctx, kept, teamID, seq, e)
	if err != nil {
		return e, err
	}
	if n > 0 {
		if err := db.boundBacklog(ctx, tx, teamID, e.Time); err != nil {
			return e, err
		}
	}
	e.ID = eventID(seq)
	e.Time = e.Time.UTC()
	return e, nil
}

// execWithEvent runs query, a write of one row, in a transaction and,
// when it wrote the row, appends e to teamID's log (with its webhook
// deliveries) in the same transaction: both are stored, or neither. It
// returns the statement's result and the event as stored. A statement
// that wrote nothing (a stale or missing row of a compare-and-swap)
// leaves nothing written and the writer given back, for the caller to ask
// which (versioned). failed makes the statement's error the caller's.
func (db *DB) execWithEvent(ctx context.Context, teamID string, e api.Event, failed func(error) error, query string, args ...any) (sql.Result, api.Event, error) {
	data, err := eventData(&e)
	if err != nil {
		return nil, e, err
	}
	db.write.prepare(ctx, query, insertEventSQL, webhooksOfTeamSQL, insertDeliverySQL)
	tx, err := db.write.BeginTx(ctx, nil)
	if err != nil {
		return nil, e, failed(err)
	}
	defer tx.Rollback()
	res, err := db.write.kept(tx).ExecContext(ctx, query, args...)
	if err != nil {
		return nil, e, failed(err)
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		tx.Rollback()
		return res, e, nil
	}
	if e, err = db.appendEvent(ctx, tx, teamID, e, data); err != nil {
		return nil, e, err
	}
	if err := tx.Commit(); err != nil {
		return nil, e, failed(err)
	}
	return res, e, nil
}

const insertEventSQL = `INSERT INTO events (team_id, type, sandbox_id, command_id, time, data) VALUES (?, ?, ?, ?, ?, ?) RETURNING seq`

// insertEvent adds an event (its data already encoded) to a team's log in
// tx and returns its sequence number.
func insertEvent(ctx context.Context, tx txQuerier, teamID string, e api.Event, data string) (int64, error) {
	var seq int64
	err := tx.QueryRowContext(ctx, insertEventSQL, teamID, e.Type, e.SandboxID, e.CommandID, formatTime(e.Time), data).Scan(&seq)
	if err != nil {
		if sqliteCode(err) == foreignKeyViolation {
			return 0, api.Errorf(api.CodeNotFound, "team %s not found", teamID)
		}
		return 0, fmt.Errorf("append event: %w", err)
	}
	return seq, nil
}

// ListEvents lists a team's events, oldest first.
func (db *DB) ListEvents(ctx context.Context, f store.EventFilter) ([]api.Event, error) {
	var w where
	w.add("team_id = ?", f.TeamID)
	if f.SandboxID != "" {
		w.add("sandbox_id = ?", f.SandboxID)
	}
	in(&w, "type", f.Types)
	if f.After != "" {
		seq, ok := eventSeq(f.After)
		if !ok {
			return nil, api.Errorf(api.CodeInvalidArgument, "cursor %q is not an event ID", f.After)
		}
		w.add("seq > ?", seq)
	}
	q := "SELECT seq, type, sandbox_id, command_id, time, data FROM events WHERE " + strings.Join(w.conds, " AND ") + " ORDER BY seq"
	if f.Limit > 0 {
		q += " LIMIT ?"
		w.args = append(w.args, f.Limit)
	}
	evs, err := queryAll(ctx, db.read, scanEvent, q, w.args...)
	if err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	return evs, nil
}

func scanEvent(r scanner) (api.Event, error) {
	var (
		e          api.Event
		seq        int64
		when, data string
	)
	if err := r.Scan(&seq, &e.Type, &e.SandboxID, &e.CommandID, &when, &data); err != nil {
		return e, err
	}
	var d decoder
	e.ID = eventID(seq)
	e.Time = d.time(when)
	d.json(data, &e.Data)
	if e.Data == nil {
		e.Data = map[string]any{}
	}
	return e, d.err
}

// DeleteEventsBefore drops events older than t.
func (db *DB) DeleteEventsBefore(ctx context.Context, t time.Time) (int64, error) {
	tx, err := db.write.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("expire events: %w", err)
	}
	defer tx.Rollback()
	// Deliveries go with their events.
	_, err = tx.ExecContext(ctx,
		"DELETE FROM webhook_deliveries WHERE event_seq IN (SELECT seq FROM events WHERE time < ?)", formatTime(t))
	if err != nil {
		return 0, fmt.Errorf("expire webhook deliveries: %w", err)
	}
	res, err := tx.ExecContext(ctx, "DELETE FROM events WHERE time < ?", formatTime(t))
	if err != nil {
		return 0, fmt.Errorf("expire events: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, err
	}
	return n, tx.Commit()
}
