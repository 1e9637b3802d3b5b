package postgres

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

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

// enqueueDeliveries adds, in the event's transaction, a pending delivery
// for each of the team's webhooks that the event matches, and returns how
// many it added.
func enqueueDeliveries(ctx context.Context, tx pgx.Tx, teamID string, seq int64, e api.Event) (int, error) {
	type hook struct {
		id     string
		events string
	}
	hooks, err := queryAll(ctx, tx, func(r scanner) (hook, error) {
		var h hook
		return h, r.Scan(&h.id, &h.events)
	}, "SELECT id, events FROM webhooks WHERE team_id = $1 ORDER BY id", teamID)
	if err != nil {
		return 0, fmt.Errorf("find webhooks of event: %w", err)
	}
	var ids []string
	for _, h := range hooks {
		var d decoder
		var patterns []string
		d.json(h.events, &patterns)
		if d.err != nil {
			return 0, fmt.Errorf("webhook %s: %w", h.id, d.err)
		}
		if store.EventMatches(patterns, e.Type) {
			ids = append(ids, h.id)
		}
	}
	return len(ids), insertDeliveries(ctx, tx, teamID, ids, seq, e, false)
}

// insertDeliveries adds a pending delivery of event seq to each webhook.
func insertDeliveries(ctx context.Context, tx pgx.Tx, teamID string, webhookIDs []string, seq int64, e api.Event, urgent bool) error {
	for _, id := range webhookIDs {
		_, err := tx.Exec(ctx,
			`INSERT INTO webhook_deliveries (webhook_id, team_id, event_seq, event_type, state, next_attempt_at, created_at, urgent) VALUES ($1, $2, $3, $4, $5, $6, $6, $7)`,
			id, teamID, seq, e.Type, string(api.DeliveryPending), e.Time, urgent)
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
// behind it. The team's event log lock, taken by the event's insert,
// makes appends of one team count and drop one at a time.
func (db *DB) boundBacklog(ctx context.Context, tx pgx.Tx, teamID string, t time.Time) error {
	limit := db.backlog.Load()
	if limit <= 0 {
		limit = store.DefaultWebhookBacklog
	}
	var n int64
	err := tx.QueryRow(ctx, `SELECT COUNT(*) FROM webhook_deliveries
		WHERE team_id = $1 AND state = 'pending' AND NOT urgent`, teamID).Scan(&n)
	if err != nil {
		return fmt.Errorf("count the webhook backlog of %s: %w", teamID, err)
	}
	if n <= limit {
		return nil
	}
	drop := n - limit + limit/10
	dropped, err := queryAll(ctx, tx, func(r scanner) (string, error) {
		var id string
		return id, r.Scan(&id)
	}, `UPDATE webhook_deliveries SET state = 'failed', reason = $1, next_attempt_at = NULL
		WHERE seq IN (SELECT seq FROM webhook_deliveries
			WHERE team_id = $2 AND state = 'pending' AND NOT urgent ORDER BY seq LIMIT $3)
		RETURNING webhook_id`, api.ReasonBacklogFull, teamID, drop)
	if err != nil {
		return fmt.Errorf("drop the webhook backlog of %s: %w", teamID, err)
	}
	per := map[string]int{}
	for _, id := range dropped {
		per[id]++
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
	_, err = db.pool.Exec(ctx,
		"INSERT INTO webhooks (id, team_id, url, events, secret, created_at) VALUES ($1, $2, $3, $4, $5, $6)",
		w.ID, w.TeamID, w.URL, events, w.Secret, w.CreatedAt)
	switch violation(err) {
	case "primary", "unique":
		return api.Errorf(api.CodeConflict, "webhook %s already exists", w.ID)
	case "foreign":
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
		w      store.Webhook
		events string
	)
	if err := r.Scan(&w.ID, &w.TeamID, &w.URL, &events, &w.Secret, &w.CreatedAt); err != nil {
		return w, err
	}
	var d decoder
	d.json(events, &w.Events)
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
	row := db.pool.QueryRow(ctx, "SELECT "+webhookColumns+" FROM webhooks"+w.clause(), w.args...)
	wh, err := scanWebhook(row)
	if errors.Is(err, pgx.ErrNoRows) {
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
	hooks, err := queryAll(ctx, db.pool, scanWebhook, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list webhooks: %w", err)
	}
	return hooks, nil
}

// DeleteWebhook removes a webhook of a team and its deliveries.
func (db *DB) DeleteWebhook(ctx context.Context, teamID, id string) error {
	return db.inTx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, "DELETE FROM webhooks WHERE id = $1 AND team_id = $2", id, teamID)
		if err != nil {
			return fmt.Errorf("delete webhook: %w", err)
		}
		if err := mustAffect(tag, api.Errorf(api.CodeNotFound, "webhook %s not found", id)); err != nil {
			return err
		}
		// ON DELETE CASCADE did this already; said here as the sqlite
		// store says it.
		if _, err := tx.Exec(ctx, "DELETE FROM webhook_deliveries WHERE webhook_id = $1", id); err != nil {
			return fmt.Errorf("delete webhook deliveries: %w", err)
		}
		return nil
	})
}

// ReplaceWebhookSecret replaces a webhook's secret if it is still prev.
func (db *DB) ReplaceWebhookSecret(ctx context.Context, id, prev, next string) (bool, error) {
	tag, err := db.pool.Exec(ctx, "UPDATE webhooks SET secret = $1 WHERE id = $2 AND secret = $3", next, id, prev)
	if err != nil {
		return false, fmt.Errorf("replace the secret of webhook %s: %w", id, err)
	}
	return tag.RowsAffected() > 0, nil
}

const deliveryColumns = "d.seq, d.webhook_id, d.event_seq, d.event_type, d.state, d.reason, d.attempt_count, d.attempts, d.next_attempt_at, d.created_at"

func scanDelivery(r scanner, extra ...any) (api.Delivery, error) {
	var (
		dl              api.Delivery
		seq, eventSeq   int64
		state, attempts string
	)
	dest := append([]any{&seq, &dl.WebhookID, &eventSeq, &dl.EventType, &state, &dl.Reason, &dl.AttemptCount, &attempts, &dl.NextAttemptAt, &dl.CreatedAt}, extra...)
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
	return dl, d.err
}

// DueDeliveries returns, for each team, the next due delivery (urgent
// first, then oldest) of each of at most perTeam of its webhooks, ordered
// by team, then delivery.
func (db *DB) DueDeliveries(ctx context.Context, t time.Time, perTeam int) ([]store.DueDelivery, error) {
	q := `WITH heads AS (
			SELECT h.team_id AS team_id, (SELECT p.seq FROM webhook_deliveries p
				WHERE p.webhook_id = h.id AND p.state = 'pending' AND p.next_attempt_at <= $1
				ORDER BY p.urgent DESC, p.seq LIMIT 1) AS seq
			FROM webhooks h),
		ranked AS (
			SELECT seq, ROW_NUMBER() OVER (PARTITION BY team_id ORDER BY seq) AS n FROM heads WHERE seq IS NOT NULL)
		SELECT ` + deliveryColumns + `, w.team_id, w.url, w.secret,
			e.seq, e.type, e.sandbox_id, e.command_id, e.time, e.data
		FROM webhook_deliveries d
		JOIN webhooks w ON w.id = d.webhook_id
		LEFT JOIN events e ON e.seq = d.event_seq
		WHERE d.seq IN (SELECT seq FROM ranked WHERE n <= $2)
		ORDER BY w.team_id, d.seq`
	scan := func(r scanner) (store.DueDelivery, error) {
		var (
			dd                store.DueDelivery
			eSeq              *int64
			eType, eSbx, eCmd *string
			eTime             *time.Time
			eData             *string
		)
		var err error
		dd.Delivery, err = scanDelivery(r, &dd.TeamID, &dd.URL, &dd.Secret, &eSeq, &eType, &eSbx, &eCmd, &eTime, &eData)
		if err != nil || eSeq == nil {
			return dd, err
		}
		var d decoder
		dd.Event = api.Event{ID: eventID(*eSeq), Type: *eType, SandboxID: *eSbx, CommandID: *eCmd, Time: *eTime}
		d.json(*eData, &dd.Event.Data)
		if dd.Event.Data == nil {
			dd.Event.Data = map[string]any{}
		}
		return dd, d.err
	}
	due, err := queryAll(ctx, db.pool, scan, q, t, perTeam)
	if err != nil {
		return nil, fmt.Errorf("due deliveries: %w", err)
	}
	return due, nil
}

// NextDeliveryAt returns when the earliest pending delivery is due.
func (db *DB) NextDeliveryAt(ctx context.Context) (time.Time, bool, error) {
	var next *time.Time
	err := db.pool.QueryRow(ctx,
		"SELECT MIN(next_attempt_at) FROM webhook_deliveries WHERE state = $1", string(api.DeliveryPending)).Scan(&next)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("next delivery: %w", err)
	}
	if next == nil {
		return time.Time{}, false, nil
	}
	return *next, true, nil
}

// RecordAttempt adds an attempt to a delivery and moves its state.
func (db *DB) RecordAttempt(ctx context.Context, id string, a api.DeliveryAttempt, state api.DeliveryState, next *time.Time) error {
	seq, ok := deliverySeq(id)
	if !ok {
		return api.Errorf(api.CodeNotFound, "delivery %s not found", id)
	}
	return db.inTx(ctx, func(tx pgx.Tx) error {
		var attempts string
		err := tx.QueryRow(ctx, "SELECT attempts FROM webhook_deliveries WHERE seq = $1 FOR UPDATE", seq).Scan(&attempts)
		if errors.Is(err, pgx.ErrNoRows) {
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
		// A delivery failed meanwhile (its backlog dropped it) stays
		// failed, unless this attempt delivered it after all.
		_, err = tx.Exec(ctx,
			`UPDATE webhook_deliveries SET attempts = $1, attempt_count = attempt_count + 1,
				state = CASE WHEN state = 'pending' OR $2 = 'delivered' THEN $2 ELSE state END,
				next_attempt_at = CASE WHEN state = 'pending' OR $2 = 'delivered' THEN $3 ELSE next_attempt_at END,
				reason = CASE WHEN $2 = 'delivered' THEN '' ELSE reason END
			WHERE seq = $4`,
			enc, string(state), next, seq)
		if err != nil {
			return fmt.Errorf("record attempt: %w", err)
		}
		return nil
	})
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
	q := w.limit("SELECT "+deliveryColumns+" FROM webhook_deliveries d"+w.clause()+" ORDER BY d.seq DESC", f.Limit)
	scan := func(r scanner) (api.Delivery, error) { return scanDelivery(r) }
	out, err := queryAll(ctx, db.pool, scan, q, w.args...)
	if err != nil {
		return nil, fmt.Errorf("list deliveries: %w", err)
	}
	return out, nil
}
