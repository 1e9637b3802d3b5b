package postgres

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

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
	var stored api.Event
	err = db.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		stored, err = db.appendEvent(ctx, tx, teamID, e, data)
		return err
	})
	if err != nil {
		return e, err
	}
	return stored, nil
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
// It returns the event as stored, with its ID.
func (db *DB) appendEvent(ctx context.Context, tx pgx.Tx, teamID string, e api.Event, data string) (api.Event, error) {
	seq, err := insertEvent(ctx, tx, teamID, e, data)
	if err != nil {
		return e, err
	}
	n, err := enqueueDeliveries(ctx, tx, teamID, seq, e)
	if err != nil {
		return e, err
	}
	if n > 0 {
		if err := db.boundBacklog(ctx, tx, teamID, e.Time); err != nil {
			return e, err
		}
	}
	e.ID = eventID(seq)
	e.Time = utc(e.Time)
	return e, nil
}

// insertEvent adds an event (its data already encoded) to a team's log in
// tx and returns its sequence number. It first takes the transaction's
// lock on the team's log: the team's sequence numbers are handed out in
// commit order, so that a reader (on any replica) that sees the team's
// event n has seen every one before it, and a cursor never skips one
// committed late. Cursors are per team (as are webhooks and their
// deliveries), so teams append side by side.
func insertEvent(ctx context.Context, tx pgx.Tx, teamID string, e api.Event, data string) (int64, error) {
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1, hashtext($2))", lockEvents, teamID); err != nil {
		return 0, fmt.Errorf("append event: %w", err)
	}
	var seq int64
	err := tx.QueryRow(ctx,
		`INSERT INTO events (team_id, type, sandbox_id, command_id, time, data) VALUES ($1, $2, $3, $4, $5, $6) RETURNING seq`,
		teamID, e.Type, e.SandboxID, e.CommandID, e.Time, data).Scan(&seq)
	if err != nil {
		if violation(err) == "foreign" {
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
	q := w.limit("SELECT seq, type, sandbox_id, command_id, time, data FROM events"+w.clause()+" ORDER BY seq", f.Limit)
	evs, err := queryAll(ctx, db.pool, scanEvent, q, w.args...)
	if err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	return evs, nil
}

func scanEvent(r scanner) (api.Event, error) {
	var (
		e    api.Event
		seq  int64
		data string
	)
	if err := r.Scan(&seq, &e.Type, &e.SandboxID, &e.CommandID, &e.Time, &data); err != nil {
		return e, err
	}
	var d decoder
	e.ID = eventID(seq)
	d.json(data, &e.Data)
	if e.Data == nil {
		e.Data = map[string]any{}
	}
	return e, d.err
}

// DeleteEventsBefore drops events older than t.
func (db *DB) DeleteEventsBefore(ctx context.Context, t time.Time) (int64, error) {
	var n int64
	err := db.inTx(ctx, func(tx pgx.Tx) error {
		// Deliveries go with their events.
		_, err := tx.Exec(ctx,
			"DELETE FROM webhook_deliveries WHERE event_seq IN (SELECT seq FROM events WHERE time < $1)", t)
		if err != nil {
			return fmt.Errorf("expire webhook deliveries: %w", err)
		}
		tag, err := tx.Exec(ctx, "DELETE FROM events WHERE time < $1", t)
		if err != nil {
			return fmt.Errorf("expire events: %w", err)
		}
		n = tag.RowsAffected()
		return nil
	})
	return n, err
}
