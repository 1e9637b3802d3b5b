package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/store"
)

const deliveryPrefix = "whd_"

// deliveryID makes a delivery's ID from its sequence number, fixed width
// so that IDs sort as their numbers do.
func deliveryID(seq int64) string { return fmt.Sprintf("%s%020d", deliveryPrefix, seq) }

func deliverySeq(id string) (int64, bool) {
	n, err := strconv.ParseInt(strings.TrimPrefix(id, deliveryPrefix), 10, 64)
	return n, err == nil && strings.HasPrefix(id, deliveryPrefix) && n >= 0
}

const (
	webhooksOfTeamSQL = "SELECT id, events FROM webhooks WHERE team_id = ? ORDER BY id"
	insertDeliverySQL = `INSERT INTO webhook_deliveries (webhook_id, team_id, event_seq, event_type, state, next_attempt_at, created_at, urgent) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`
)

// enqueueDeliveries adds, in the event's transaction, a pending delivery
// for each of the team's webhooks that the event matches, and returns how
// many it added.
func enqueueDeliveries(ctx context.Context, tx txQuerier, teamID string, seq int64, e api.Event) (int, error) {
	rows, err := tx.QueryContext(ctx, webhooksOfTeamSQL, teamID)
	if err != nil {
		return 0, fmt.Errorf("find webhooks of event: %w", err)
	}
	var ids []string
	for rows.Next() {
		var id, events string
		if err := rows.Scan(&id, &events); err != nil {
			rows.Close()
			return 0, fmt.Errorf("find webhooks of event: %w", err)
		}
		var d decoder
		var patterns []string
		d.json(events, &patterns)
		if d.err != nil {
			rows.Close()
			return 0, fmt.Errorf("webhook %s: %w", id, d.err)
		}
		if store.EventMatches(patterns, e.Type) {
			ids = append(ids, id)
		}
	}
	if err := rows.Close(); err != nil {
		return 0, err
	}
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("find webhooks of event: %w", err)
	}
	return len(ids), insertDeliveries(ctx, tx, teamID, ids, seq, e, false)
}

// insertDeliveries adds a pending delivery of event seq to each webhook.
func insertDeliveries(ctx context.Context, tx txQuerier, teamID string, webhookIDs []string, seq int64, e api.Event, urgent bool) error {
	now := formatTime(e.Time)
	for _, id := range webhookIDs {
		_, err := tx.ExecContext(ctx, insertDeliverySQL, id, teamID, seq, e.Type, string(api.DeliveryPending), now, now, urgent)
		if err != nil {
			return fmt.Errorf("enqueue delivery to %s: %w", id, err)
		}
	}
	return nil
}

// SetWebhookBacklog bounds each team's pending deliveries (urgent ones
// aside) to n; default store.DefaultWebhookBacklog. Call it before use.
func (db *DB) SetWebhookBacklog(n int) { db.backlog.Store(int64(n)) }

// boundBacklog keeps, in an event's transaction, the team's pending
// backlog within its bound: past it, the oldest pending deliveries fail
// with reason backlog_full, down to nine tenths of the bound (so that a
// team held over it drops in batches, not at every event), and a
// webhook.dropped event saying how many goes to each webhook that lost
// some, as an urgent delivery: sent before the webhook's backlog, never
// behind it.
func (db *DB) boundBacklog(ctx context.Context, tx *sql.Tx, teamID string, t time.Time) error {
	limit := db.backlog.Load()
	if limit <= 0 {
		limit = store.DefaultWebhookBacklog
	}
	var n int64
	err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM webhook_deliveries INDEXED BY webhook_deliveries_backlog
		WHERE team_id = ? AND state = 'pending' AND urgent = 0`, teamID).Scan(&n)
	if err != nil {
		return fmt.Errorf("count the webhook backlog of %s: %w", teamID, err)
	}
	if n <= limit {
		return nil
	}
	drop := n - limit + limit/10
	rows, err := tx.QueryContext(ctx, `UPDATE webhook_deliveries SET state = 'failed', reason = ?, next_attempt_at = NULL
		WHERE seq IN (SELECT seq FROM webhook_deliveries INDEXED BY webhook_deliveries_backlog
			WHERE team_id = ? AND state = 'pending' AND urgent = 0 ORDER BY seq LIMIT ?)
		RETURNING webhook_id`, api.ReasonBacklogFull, teamID, drop)
	if err != nil {
		return fmt.Errorf("drop the webhook backlog of %s: %w", teamID, err)
	}
	per := map[string]int{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return fmt.Errorf("drop the webhook backlog of %s: %w", teamID, err)
		}
		per[id]++
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return fmt.Errorf("drop the webhook backlog of %s: %w", teamID, err)
	}
	counts := make(map[string]any, len(per))
	for id, c := range per {
		counts[id] = c
	}
	e := api.Event{Type: api.EventWebhookDropped, Time: t, Data: map[string]any{
		"dropped": drop, "reason": api.ReasonBacklogFull, "backlog": limit, "webhooks": counts,
	}}
	data, err := encodeJSON(e.Data)
	if err != nil {
		return err
	}
	seq, err := insertEvent(ctx, tx, teamID, e, data)
	if err != nil {
		return err
	}
	return insertDeliveries(ctx, tx, teamID, slices.Sorted(maps.Keys(per)), seq, e, true)
}

// CreateWebhook stores a webhook.
func (db *DB) CreateWebhook(ctx context.Context, w store.Webhook) error {
	if w.Events == nil {
		w.Events = []string{}
	}
	events, err := encodeJSON(w.Events)
	if err != nil {
		return err
	}
	_, err = db.write.ExecContext(ctx,
		"INSERT INTO webhooks (id, team_id, url, events, secret, created_at) VALUES (?, ?, ?, ?, ?, ?)",
		w.ID, w.TeamID, w.URL, events, w.Secret, formatTime(w.CreatedAt))
	switch sqliteCode(err) {
	case primaryKeyViolation, uniqueViolation:
		return api.Errorf(api.CodeConflict, "webhook %s already exists", w.ID)
	case foreignKeyViolation:
		return api.Errorf(api.CodeNotFound, "team %s not found", w.TeamID)
	}
	if err != nil {
		return fmt.Errorf("create webhook: %w", err)
	}
	return nil
}

const webhookColumns = "id, team_id, url, events, secret, created_at"

func scanWebhook(r scanner) (store.Webhook, error) {
	var (
		w               store.Webhook
		events, created string
	)
	if err := r.Scan(&w.ID, &w.TeamID, &w.URL, &events, &w.Secret, &created); err != nil {
		return w, err
	}
	var d decoder
	d.json(events, &w.Events)
	w.CreatedAt = d.time(created)
	if w.Events == nil {
		w.Events = []string{}
	}
	return w, d.err
}

// GetWebhook finds a webhook of a team ("" for any team).
func (db *DB) GetWebhook(ctx context.Context, teamID, id string) (store.Webhook, error) {
	var w where
	w.add("id = ?", id)
	if teamID != "" {
		w.add("team_id = ?", teamID)
	}
	row := db.read.QueryRowContext(ctx, "SELECT "+webhookColumns+" FROM webhooks WHERE "+strings.Join(w.conds, " AND "), w.args...)
	wh, err := scanWebhook(row)
	if errors.Is(err, sql.ErrNoRows) {
		return wh, api.Errorf(api.CodeNotFound, "webhook %s not found", id)
	}
	if err != nil {
		return wh, fmt.Errorf("get webhook: %w", err)
	}
	return wh, nil
}

// ListWebhooks lists a team's webhooks by ID.
func (db *DB) ListWebhooks(ctx context.Context, f store.WebhookFilter) ([]store.Webhook, error) {
	var w where
	if f.TeamID != "" {
		w.add("team_id = ?", f.TeamID)
	}
	q, args := w.query("SELECT "+webhookColumns+" FROM webhooks", f.After, f.Limit)
	hooks, err := queryAll(ctx, db.read, scanWebhook, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list webhooks: %w", err)
	}
	return hooks, nil
}

// DeleteWebhook removes a webhook of a team and its deliveries.
func (db *DB) DeleteWebhook(ctx context.Context, teamID, id string) error {
	tx, err := db.write.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("delete webhook: %w", err)
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, "DELETE FROM webhooks WHERE id = ? AND team_id = ?", id, teamID)
	if err != nil {
		return fmt.Errorf("delete webhook: %w", err)
	}
	if err := mustAffect(res, api.Errorf(api.CodeNotFound, "webhook %s not found", id)); err != nil {
		return err
	}
	// ON DELETE CASCADE does this too; said here so that it does not rest
	// on a pragma.
	if _, err := tx.ExecContext(ctx, "DELETE FROM webhook_deliveries WHERE webhook_id = ?", id); err != nil {
		return fmt.Errorf("delete webhook deliveries: %w", err)
	}
	return tx.Commit()
}

// ReplaceWebhookSecret replaces a webhook's secret if it is still prev.
func (db *DB) ReplaceWebhookSecret(ctx context.Context, id, prev, next string) (bool, error) {
	res, err := db.write.ExecContext(ctx, "UPDATE webhooks SET secret = ? WHERE id = ? AND secret = ?", next, id, prev)
	if err != nil {
		return false, fmt.Errorf("replace the secret of webhook %s: %w", id, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("replace the secret of webhook %s: %w", id, err)
	}
	return n > 0, nil
}

const deliveryColumns = "d.seq, d.webhook_id, d.event_seq, d.event_type, d.state, d.reason, d.attempt_count, d.attempts, d.next_attempt_at, d.created_at"

func scanDelivery(r scanner, extra ...any) (api.Delivery, error) {
	var (
		dl              api.Delivery
		seq, eventSeq   int64
		state, attempts string
		next            sql.NullString
		created         string
	)
	dest := append([]any{&seq, &dl.WebhookID, &eventSeq, &dl.EventType, &state, &dl.Reason, &dl.AttemptCount, &attempts, &next, &created}, extra...)
	if err := r.Scan(dest...); err != nil {
		return dl, err
	}
	var d decoder
	dl.ID = deliveryID(seq)
	dl.EventID = eventID(eventSeq)
	dl.State = api.DeliveryState(state)
	d.json(attempts, &dl.Attempts)
	if dl.Attempts == nil {
		dl.Attempts = []api.DeliveryAttempt{}
	}
	dl.NextAttemptAt = d.timePtr(next)
	dl.CreatedAt = d.time(created)
	return dl, d.err
}

// DueDeliveries returns, for each team, the next due delivery (urgent
// first, then oldest) of each of at most perTeam of its webhooks, ordered
// by team, then delivery.
func (db *DB) DueDeliveries(ctx context.Context, t time.Time, perTeam int) ([]store.DueDelivery, error) {
	q := `WITH heads AS (
			SELECT h.team_id AS team_id, (SELECT p.seq FROM webhook_deliveries p INDEXED BY webhook_deliveries_pending
				WHERE p.webhook_id = h.id AND p.state = 'pending' AND p.next_attempt_at <= ?
				ORDER BY p.urgent DESC, p.seq LIMIT 1) AS seq
			FROM webhooks h),
		ranked AS (
			SELECT seq, ROW_NUMBER() OVER (PARTITION BY team_id ORDER BY seq) AS n FROM heads WHERE seq IS NOT NULL)
		SELECT ` + deliveryColumns + `, w.team_id, w.url, w.secret,
			e.seq, e.type, e.sandbox_id, e.command_id, e.time, e.data
		FROM webhook_deliveries d
		JOIN webhooks w ON w.id = d.webhook_id
		LEFT JOIN events e ON e.seq = d.event_seq
		WHERE d.seq IN (SELECT seq FROM ranked WHERE n <= ?)
		ORDER BY w.team_id, d.seq`
	scan := func(r scanner) (store.DueDelivery, error) {
		var (
			dd                store.DueDelivery
			eSeq              sql.NullInt64
			eType, eSbx, eCmd sql.NullString
			eTime, eData      sql.NullString
		)
		var err error
		dd.Delivery, err = scanDelivery(r, &dd.TeamID, &dd.URL, &dd.Secret, &eSeq, &eType, &eSbx, &eCmd, &eTime, &eData)
		if err != nil || !eSeq.Valid {
			return dd, err
		}
		var d decoder
		dd.Event = api.Event{ID: eventID(eSeq.Int64), Type: eType.String, SandboxID: eSbx.String, CommandID: eCmd.String,
			Time: d.time(eTime.String)}
		d.json(eData.String, &dd.Event.Data)
		if dd.Event.Data == nil {
			dd.Event.Data = map[string]any{}
		}
		return dd, d.err
	}
	due, err := queryAll(ctx, db.read, scan, q, formatTime(t), perTeam)
	if err != nil {
		return nil, fmt.Errorf("due deliveries: %w", err)
	}
	return due, nil
}

// NextDeliveryAt returns when the earliest pending delivery is due.
func (db *DB) NextDeliveryAt(ctx context.Context) (time.Time, bool, error) {
	var next sql.NullString
	err := db.read.QueryRowContext(ctx,
		"SELECT MIN(next_attempt_at) FROM webhook_deliveries WHERE state = ?", string(api.DeliveryPending)).Scan(&next)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("next delivery: %w", err)
	}
	if !next.Valid {
		return time.Time{}, false, nil
	}
	var d decoder
	t := d.time(next.String)
	return t, d.err == nil, d.err
}

// RecordAttempt adds an attempt to a delivery and moves its state.
func (db *DB) RecordAttempt(ctx context.Context, id string, a api.DeliveryAttempt, state api.DeliveryState, next *time.Time) error {
	seq, ok := deliverySeq(id)
	if !ok {
		return api.Errorf(api.CodeNotFound, "delivery %s not found", id)
	}
	tx, err := db.write.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("record attempt: %w", err)
	}
	defer tx.Rollback()
	var attempts string
	err = tx.QueryRowContext(ctx, "SELECT attempts FROM webhook_deliveries WHERE seq = ?", seq).Scan(&attempts)
	if errors.Is(err, sql.ErrNoRows) {
		return api.Errorf(api.CodeNotFound, "delivery %s not found", id)
	}
	if err != nil {
		return fmt.Errorf("record attempt: %w", err)
	}
	var list []api.DeliveryAttempt
	var d decoder
	d.json(attempts, &list)
	if d.err != nil {
		return d.err
	}
	a.Time = a.Time.UTC()
	list = append(list, a)
	if len(list) > store.MaxAttemptsKept {
		list = list[len(list)-store.MaxAttemptsKept:]
	}
	enc, err := encodeJSON(list)
	if err != nil {
		return err
	}
	// A delivery failed meanwhile (its backlog dropped it) stays failed,
	// unless this attempt delivered it after all.
	_, err = tx.ExecContext(ctx,
		`UPDATE webhook_deliveries SET attempts = ?, attempt_count = attempt_count + 1,
			state = CASE WHEN state = 'pending' OR ? = 'delivered' THEN ? ELSE state END,
			next_attempt_at = CASE WHEN state = 'pending' OR ? = 'delivered' THEN ? ELSE next_attempt_at END,
			reason = CASE WHEN ? = 'delivered' THEN '' ELSE reason END
		WHERE seq = ?`,
		enc, string(state), string(state), string(state), nullTime(next), string(state), seq)
	if err != nil {
		return fmt.Errorf("record attempt: %w", err)
	}
	return tx.Commit()
}

// ListDeliveries lists a webhook's deliveries, newest first.
func (db *DB) ListDeliveries(ctx context.Context, f store.DeliveryFilter) ([]api.Delivery, error) {
	var w where
	w.add("d.webhook_id = ?", f.WebhookID)
	if f.After != "" {
		seq, ok := deliverySeq(f.After)
		if !ok {
			return nil, api.Errorf(api.CodeInvalidArgument, "cursor %q is not a delivery ID", f.After)
		}
		w.add("d.seq < ?", seq)
	}
	q := "SELECT " + deliveryColumns + " FROM webhook_deliveries d WHERE " + strings.Join(w.conds, " AND ") + " ORDER BY d.seq DESC"
	if f.Limit > 0 {
		q += " LIMIT ?"
		w.args = append(w.args, f.Limit)
	}
	scan := func(r scanner) (api.Delivery, error) { return scanDelivery(r) }
	out, err := queryAll(ctx, db.read, scan, q, w.args...)
	if err != nil {
		return nil, fmt.Errorf("list deliveries: %w", err)
	}
	return out, nil
}
