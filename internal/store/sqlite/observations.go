package sqlite

import (
	"context"
	"fmt"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/store"
)

// otherDestination collects a sandbox's new destinations once it has as
// many rows as it may keep.
const otherDestination = "other"

// AddObservations adds the node's reports to their rows, in one
// transaction.
func (db *DB) AddObservations(ctx context.Context, reports []store.Observation, maxPerSandbox int) error {
	if len(reports) == 0 {
		return nil
	}
	tx, err := db.write.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("add observations: %w", err)
	}
	defer tx.Rollback()
	rows := map[string]int{} // rows per sandbox, counted once it is first met
	for _, r := range reports {
		n, ok := rows[r.SandboxID]
		if !ok {
			var exists bool
			if err := tx.QueryRowContext(ctx, "SELECT EXISTS (SELECT 1 FROM sandboxes WHERE id = ?)", r.SandboxID).Scan(&exists); err != nil {
				return fmt.Errorf("add observations: %w", err)
			}
			if !exists {
				return api.Errorf(api.CodeNotFound, "sandbox %s not found", r.SandboxID)
			}
			if err := tx.QueryRowContext(ctx, "SELECT count(*) FROM network_observations WHERE sandbox_id = ?", r.SandboxID).Scan(&n); err != nil {
				return fmt.Errorf("add observations: %w", err)
			}
		}
		var known bool
		err := tx.QueryRowContext(ctx,
			"SELECT EXISTS (SELECT 1 FROM network_observations WHERE sandbox_id = ? AND destination = ? AND port = ? AND decision = ? AND reason = ?)",
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
		_, err = tx.ExecContext(ctx, `INSERT INTO network_observations
			(sandbox_id, destination, port, decision, reason, count, bytes_out, bytes_in, first_seen, last_seen, last_command_id, injected, last_status)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (sandbox_id, destination, port, decision, reason) DO UPDATE SET
				count = count + excluded.count,
				bytes_out = bytes_out + excluded.bytes_out,
				bytes_in = bytes_in + excluded.bytes_in,
				first_seen = min(first_seen, excluded.first_seen),
				last_seen = max(last_seen, excluded.last_seen),
				last_command_id = CASE WHEN excluded.last_command_id != '' THEN excluded.last_command_id ELSE last_command_id END,
				injected = injected + excluded.injected,
				last_status = CASE WHEN excluded.last_status != 0 THEN excluded.last_status ELSE last_status END`,
			r.SandboxID, r.Destination, r.Port, r.Decision, r.Reason, r.Count, r.BytesOut, r.BytesIn,
			formatTime(r.FirstSeen), formatTime(r.LastSeen), r.LastCommandID, r.Injected, r.LastStatus)
		if err != nil {
			return fmt.Errorf("add observations: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("add observations: %w", err)
	}
	return nil
}

// ListObservations returns a sandbox's observations.
func (db *DB) ListObservations(ctx context.Context, sandboxID string) ([]api.NetworkObservation, error) {
	obs, err := queryAll(ctx, db.read, scanObservation, `SELECT destination, port, decision, reason, count, bytes_out, bytes_in,
		first_seen, last_seen, last_command_id, injected, last_status FROM network_observations WHERE sandbox_id = ?
		ORDER BY destination, port, decision, reason`, sandboxID)
	if err != nil {
		return nil, fmt.Errorf("list observations: %w", err)
	}
	return obs, nil
}

func scanObservation(r scanner) (api.NetworkObservation, error) {
	var (
		o           api.NetworkObservation
		first, last string
	)
	if err := r.Scan(&o.Destination, &o.Port, &o.Decision, &o.Reason, &o.Count, &o.BytesOut, &o.BytesIn, &first, &last, &o.LastCommandID, &o.Injected, &o.LastStatus); err != nil {
		return o, err
	}
	var d decoder
	o.FirstSeen = d.time(first)
	o.LastSeen = d.time(last)
	return o, d.err
}

// DeleteObservationsBefore drops observations last seen before t.
func (db *DB) DeleteObservationsBefore(ctx context.Context, t time.Time) (int64, error) {
	res, err := db.write.ExecContext(ctx, "DELETE FROM network_observations WHERE last_seen < ?", formatTime(t))
	if err != nil {
		return 0, fmt.Errorf("expire observations: %w", err)
	}
	return res.RowsAffected()
}
