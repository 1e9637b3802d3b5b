package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/store"
)

// otherDestination collects a sandbox's new destinations once it has as
// many rows as it may keep.
const otherDestination = "other"

// AddObservations adds the node's reports to their rows, in one
// transaction. A per-sandbox advisory lock keeps two replicas adding at
// once from both counting a sandbox's rows below its bound.
func (db *DB) AddObservations(ctx context.Context, reports []store.Observation, maxPerSandbox int) error {
	if len(reports) == 0 {
		return nil
	}
	return db.inTx(ctx, func(tx pgx.Tx) error {
		rows := map[string]int{} // rows per sandbox, counted once it is first met
		for _, r := range reports {
			n, ok := rows[r.SandboxID]
			if !ok {
				if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1, hashtext($2))", lockObservations, r.SandboxID); err != nil {
					return fmt.Errorf("add observations: %w", err)
				}
				var exists bool
				if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM sandboxes WHERE id = $1)", r.SandboxID).Scan(&exists); err != nil {
					return fmt.Errorf("add observations: %w", err)
				}
				if !exists {
					return api.Errorf(api.CodeNotFound, "sandbox %s not found", r.SandboxID)
				}
				if err := tx.QueryRow(ctx, "SELECT count(*) FROM network_observations WHERE sandbox_id = $1", r.SandboxID).Scan(&n); err != nil {
					return fmt.Errorf("add observations: %w", err)
				}
			}
			var known bool
			err := tx.QueryRow(ctx,
				"SELECT EXISTS (SELECT 1 FROM network_observations WHERE sandbox_id = $1 AND destination = $2 AND port = $3 AND decision = $4 AND reason = $5)",
				r.SandboxID, r.Destination, r.Port, r.Decision, r.Reason).Scan(&known)
			if err != nil {
				return fmt.Errorf("add observations: %w", err)
			}
			switch {
			case !known && n >= maxPerSandbox:
				r.Destination, r.Port = otherDestination, 0
			case !known:
				n++
			}
			rows[r.SandboxID] = n
			_, err = tx.Exec(ctx, `INSERT INTO network_observations AS o
				(sandbox_id, destination, port, decision, reason, count, bytes_out, bytes_in, first_seen, last_seen, last_command_id, injected, last_status)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)
				ON CONFLICT (sandbox_id, destination, port, decision, reason) DO UPDATE SET
					count = o.count + excluded.count,
					bytes_out = o.bytes_out + excluded.bytes_out,
					bytes_in = o.bytes_in + excluded.bytes_in,
					first_seen = least(o.first_seen, excluded.first_seen),
					last_seen = greatest(o.last_seen, excluded.last_seen),
					last_command_id = CASE WHEN excluded.last_command_id <> '' THEN excluded.last_command_id ELSE o.last_command_id END,
					injected = o.injected + excluded.injected,
					last_status = CASE WHEN excluded.last_status <> 0 THEN excluded.last_status ELSE o.last_status END`,
				r.SandboxID, r.Destination, r.Port, r.Decision, r.Reason, r.Count, r.BytesOut, r.BytesIn,
				r.FirstSeen, r.LastSeen, r.LastCommandID, r.Injected, r.LastStatus)
			if err != nil {
				return fmt.Errorf("add observations: %w", err)
			}
		}
		return nil
	})
}

// ListObservations returns a sandbox's observations.
func (db *DB) ListObservations(ctx context.Context, sandboxID string) ([]api.NetworkObservation, error) {
	obs, err := queryAll(ctx, db.pool, scanObservation, `SELECT destination, port, decision, reason, count, bytes_out, bytes_in,
		first_seen, last_seen, last_command_id, injected, last_status FROM network_observations WHERE sandbox_id = $1
		ORDER BY destination, port, decision, reason`, sandboxID)
	if err != nil {
		return nil, fmt.Errorf("list observations: %w", err)
	}
	return obs, nil
}

func scanObservation(r scanner) (api.NetworkObservation, error) {
	var o api.NetworkObservation
	err := r.Scan(&o.Destination, &o.Port, &o.Decision, &o.Reason, &o.Count, &o.BytesOut, &o.BytesIn, &o.FirstSeen, &o.LastSeen, &o.LastCommandID, &o.Injected, &o.LastStatus)
	return o, err
}

// DeleteObservationsBefore drops observations last seen before t.
func (db *DB) DeleteObservationsBefore(ctx context.Context, t time.Time) (int64, error) {
	tag, err := db.pool.Exec(ctx, "DELETE FROM network_observations WHERE last_seen < $1", t)
	if err != nil {
		return 0, fmt.Errorf("expire observations: %w", err)
	}
	return tag.RowsAffected(), nil
}
