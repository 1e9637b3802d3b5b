package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/store"
)

var _ store.Usage = (*DB)(nil)

// AppendSamples stores raw samples and folds each into its minute.
func (db *DB) AppendSamples(ctx context.Context, samples []store.Sample) error {
	if len(samples) == 0 {
		return nil
	}
	return db.inTx(ctx, func(tx pgx.Tx) error {
		for _, s := range samples {
			_, err := tx.Exec(ctx, `INSERT INTO samples (sandbox_id, time, cpu_millicores,
				memory_bytes, memory_peak_bytes, disk_bytes, net_in_bytes, net_out_bytes) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
				ON CONFLICT (sandbox_id, time) DO UPDATE SET cpu_millicores = excluded.cpu_millicores,
					memory_bytes = excluded.memory_bytes, memory_peak_bytes = excluded.memory_peak_bytes,
					disk_bytes = excluded.disk_bytes, net_in_bytes = excluded.net_in_bytes, net_out_bytes = excluded.net_out_bytes`,
				s.SandboxID, s.Time, s.CPUMillicores, s.MemoryBytes, s.MemoryPeakBytes, s.DiskBytes, s.NetInBytes, s.NetOutBytes)
			if err != nil {
				return fmt.Errorf("insert sample of %s: %w", s.SandboxID, err)
			}
			_, err = tx.Exec(ctx, `INSERT INTO sample_minutes AS m (sandbox_id, minute, n,
				cpu_sum, cpu_max, memory_sum, memory_max, memory_peak_max, disk_sum, disk_max, net_in_bytes, net_out_bytes)
				VALUES ($1, $2, 1, $3, $3, $4, $4, $5, $6, $6, $7, $8)
				ON CONFLICT (sandbox_id, minute) DO UPDATE SET n = m.n + 1,
					cpu_sum = m.cpu_sum + $3, cpu_max = greatest(m.cpu_max, $3),
					memory_sum = m.memory_sum + $4, memory_max = greatest(m.memory_max, $4),
					memory_peak_max = greatest(m.memory_peak_max, $5),
					disk_sum = m.disk_sum + $6, disk_max = greatest(m.disk_max, $6),
					net_in_bytes = m.net_in_bytes + $7, net_out_bytes = m.net_out_bytes + $8`,
				s.SandboxID, s.Time.Truncate(time.Minute), s.CPUMillicores, s.MemoryBytes, s.MemoryPeakBytes, s.DiskBytes, s.NetInBytes, s.NetOutBytes)
			if err != nil {
				return fmt.Errorf("roll up sample of %s: %w", s.SandboxID, err)
			}
		}
		return nil
	})
}

// ListSamples returns a sandbox's raw samples in (from, to].
func (db *DB) ListSamples(ctx context.Context, sandboxID string, from, to time.Time, limit int) ([]store.Sample, error) {
	w := where{args: []any{sandboxID, from, to}}
	q := w.limit(`SELECT sandbox_id, time, cpu_millicores, memory_bytes, memory_peak_bytes, disk_bytes, net_in_bytes, net_out_bytes
		FROM samples WHERE sandbox_id = $1 AND time > $2 AND time <= $3 ORDER BY time`, limit)
	out, err := queryAll(ctx, db.pool, func(r scanner) (store.Sample, error) {
		var s store.Sample
		err := r.Scan(&s.SandboxID, &s.Time, &s.CPUMillicores, &s.MemoryBytes, &s.MemoryPeakBytes, &s.DiskBytes, &s.NetInBytes, &s.NetOutBytes)
		return s, err
	}, q, w.args...)
	if err != nil {
		return nil, fmt.Errorf("list samples of %s: %w", sandboxID, err)
	}
	return out, nil
}

// ListMinutes returns a sandbox's rollups with minute in [from, to).
func (db *DB) ListMinutes(ctx context.Context, sandboxID string, from, to time.Time, limit int) ([]store.Minute, error) {
	w := where{args: []any{sandboxID, from, to}}
	q := w.limit(`SELECT sandbox_id, minute, n, cpu_sum, cpu_max, memory_sum, memory_max, memory_peak_max,
		disk_sum, disk_max, net_in_bytes, net_out_bytes
		FROM sample_minutes WHERE sandbox_id = $1 AND minute >= $2 AND minute < $3 ORDER BY minute`, limit)
	out, err := queryAll(ctx, db.pool, func(r scanner) (store.Minute, error) {
		var m store.Minute
		err := r.Scan(&m.SandboxID, &m.Minute, &m.N, &m.CPUSum, &m.CPUMax, &m.MemorySum, &m.MemoryMax, &m.MemoryPeakMax,
			&m.DiskSum, &m.DiskMax, &m.NetInBytes, &m.NetOutBytes)
		return m, err
	}, q, w.args...)
	if err != nil {
		return nil, fmt.Errorf("list sample rollups of %s: %w", sandboxID, err)
	}
	return out, nil
}

// DeleteSamplesBefore drops raw samples older than raw and rollups older
// than minutes.
func (db *DB) DeleteSamplesBefore(ctx context.Context, raw, minutes time.Time) error {
	if _, err := db.pool.Exec(ctx, "DELETE FROM samples WHERE time < $1", raw); err != nil {
		return fmt.Errorf("delete samples: %w", err)
	}
	if _, err := db.pool.Exec(ctx, "DELETE FROM sample_minutes WHERE minute < $1", minutes); err != nil {
		return fmt.Errorf("delete sample rollups: %w", err)
	}
	return nil
}

// AccrueUsage adds accruals to their hours and sandboxes' costs.
func (db *DB) AccrueUsage(ctx context.Context, accruals []store.Accrual) error {
	if len(accruals) == 0 {
		return nil
	}
	return db.inTx(ctx, func(tx pgx.Tx) error {
		for _, a := range accruals {
			// The meter moves first, and only from the accrual's cursor:
			// a charge another replica made meanwhile (its row lock is
			// waited for, then the condition read again) refuses the batch.
			var tag pgconn.CommandTag
			var err error
			if a.Cursor == nil {
				tag, err = tx.Exec(ctx, `INSERT INTO meters AS m (sandbox_id, accrued_until) VALUES ($1, $2)
					ON CONFLICT (sandbox_id) DO UPDATE SET accrued_until = $2 WHERE m.accrued_until IS NULL`, a.SandboxID, a.Until)
			} else {
				tag, err = tx.Exec(ctx, "UPDATE meters SET accrued_until = $2 WHERE sandbox_id = $1 AND accrued_until = $3",
					a.SandboxID, a.Until, *a.Cursor)
			}
			if violation(err) == "foreign" {
				return api.Errorf(api.CodeNotFound, "sandbox %s not found", a.SandboxID)
			}
			if err != nil {
				return fmt.Errorf("move meter of %s: %w", a.SandboxID, err)
			}
			if err := mustAffect(tag, api.Errorf(api.CodeConflict, "the meter of sandbox %s moved since it was read", a.SandboxID)); err != nil {
				return err
			}
			_, err = tx.Exec(ctx, `INSERT INTO usage_hours AS u (sandbox_id, team_id, hour, cpu_s, memory_gib_s,
				storage_gib_h, egress_bytes, cost_usd) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
				ON CONFLICT (sandbox_id, hour) DO UPDATE SET cpu_s = u.cpu_s + $4, memory_gib_s = u.memory_gib_s + $5,
					storage_gib_h = u.storage_gib_h + $6, egress_bytes = u.egress_bytes + $7, cost_usd = u.cost_usd + $8`,
				a.SandboxID, a.TeamID, a.Hour.Truncate(time.Hour), a.CPUS, a.MemoryGiBS, a.StorageGiBH, a.EgressBytes, a.CostUSD)
			if violation(err) == "foreign" {
				return api.Errorf(api.CodeNotFound, "sandbox %s not found", a.SandboxID)
			}
			if err != nil {
				return fmt.Errorf("accrue usage of %s: %w", a.SandboxID, err)
			}
			tag, err = tx.Exec(ctx, "UPDATE sandboxes SET cost_usd = cost_usd + $1 WHERE id = $2", a.CostUSD, a.SandboxID)
			if err != nil {
				return fmt.Errorf("add cost of %s: %w", a.SandboxID, err)
			}
			if err := mustAffect(tag, api.Errorf(api.CodeNotFound, "sandbox %s not found", a.SandboxID)); err != nil {
				return err
			}
		}
		return nil
	})
}

// GetMeter returns a sandbox's meter.
func (db *DB) GetMeter(ctx context.Context, sandboxID string) (store.Meter, error) {
	var m store.Meter
	err := db.pool.QueryRow(ctx, "SELECT accrued_until, stored_bytes FROM meters WHERE sandbox_id = $1", sandboxID).
		Scan(&m.AccruedUntil, &m.StoredBytes)
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Meter{}, nil
	}
	if err != nil {
		return store.Meter{}, fmt.Errorf("get meter of %s: %w", sandboxID, err)
	}
	return m, nil
}

// SetStoredBytes records the size of a sandbox's save.
func (db *DB) SetStoredBytes(ctx context.Context, sandboxID string, bytes int64) error {
	_, err := db.pool.Exec(ctx, `INSERT INTO meters (sandbox_id, stored_bytes) VALUES ($1, $2)
		ON CONFLICT (sandbox_id) DO UPDATE SET stored_bytes = $2`, sandboxID, bytes)
	if violation(err) == "foreign" {
		return api.Errorf(api.CodeNotFound, "sandbox %s not found", sandboxID)
	}
	if err != nil {
		return fmt.Errorf("set stored bytes of %s: %w", sandboxID, err)
	}
	return nil
}

// SumUsage adds up usage by day (UTC), by sandbox or in all.
func (db *DB) SumUsage(ctx context.Context, f store.UsageFilter) ([]api.Usage, error) {
	var w where
	if f.TeamID != "" {
		w.add("team_id = ?", f.TeamID)
	}
	if f.SandboxID != "" {
		w.add("sandbox_id = ?", f.SandboxID)
	}
	if !f.From.IsZero() {
		w.add("hour >= ?", f.From)
	}
	if !f.To.IsZero() {
		w.add("hour < ?", f.To)
	}
	key, group := "''::text", ""
	switch f.GroupBy {
	case "day":
		key, group = "to_char(hour AT TIME ZONE 'UTC', 'YYYY-MM-DD')", " GROUP BY 1 ORDER BY 1"
	case "sandbox":
		key, group = "sandbox_id", " GROUP BY 1 ORDER BY 1"
	case "":
	default:
		return nil, api.Errorf(api.CodeInvalidArgument, "group_by %q is unknown; use day or sandbox", f.GroupBy)
	}
	q := "SELECT " + key + `, coalesce(sum(cpu_s), 0), coalesce(sum(memory_gib_s), 0), coalesce(sum(storage_gib_h), 0),
		coalesce(sum(egress_bytes), 0)::bigint, coalesce(sum(cost_usd), 0), coalesce(sum(gpu_s), 0) FROM usage_hours` +
		w.clause() + group
	out, err := queryAll(ctx, db.pool, func(r scanner) (api.Usage, error) {
		var u api.Usage
		var k string
		err := r.Scan(&k, &u.CPUS, &u.MemoryGiBS, &u.StorageGiBH, &u.EgressBytes, &u.CostUSD, &u.GPUS)
		switch f.GroupBy {
		case "day":
			u.Day = k
		case "sandbox":
			u.SandboxID = k
		}
		return u, err
	}, q, w.args...)
	if err != nil {
		return nil, fmt.Errorf("sum usage: %w", err)
	}
	return out, nil
}

// GetBudgetState returns a budget's state; unknown keys have a zero one.
func (db *DB) GetBudgetState(ctx context.Context, key string) (store.BudgetState, error) {
	b := store.BudgetState{Key: key, Alerted: []float64{}}
	var alerted string
	err := db.pool.QueryRow(ctx, "SELECT alerted, exceeded FROM budget_states WHERE key = $1", key).Scan(&alerted, &b.Exceeded)
	if errors.Is(err, pgx.ErrNoRows) {
		return b, nil
	}
	if err != nil {
		return b, fmt.Errorf("get budget state %s: %w", key, err)
	}
	var d decoder
	d.json(alerted, &b.Alerted)
	if b.Alerted == nil {
		b.Alerted = []float64{}
	}
	return b, d.err
}

// PutBudgetState replaces a budget's state.
func (db *DB) PutBudgetState(ctx context.Context, b store.BudgetState) error {
	if b.Alerted == nil {
		b.Alerted = []float64{}
	}
	alerted, err := encodeJSON(b.Alerted)
	if err != nil {
		return err
	}
	_, err = db.pool.Exec(ctx, `INSERT INTO budget_states (key, alerted, exceeded) VALUES ($1, $2, $3)
		ON CONFLICT (key) DO UPDATE SET alerted = $2, exceeded = $3`, b.Key, alerted, b.Exceeded)
	if err != nil {
		return fmt.Errorf("put budget state %s: %w", b.Key, err)
	}
	return nil
}

// PutWorkloadUsage sets a workload's usage per hour, in one transaction.
func (db *DB) PutWorkloadUsage(ctx context.Context, accruals []store.Accrual) error {
	if len(accruals) == 0 {
		return nil
	}
	return db.inTx(ctx, func(tx pgx.Tx) error {
		for _, a := range accruals {
			if a.SandboxID == "" || a.TeamID == "" {
				return api.Errorf(api.CodeInvalidArgument, "workload usage needs a workload and a team")
			}
			_, err := tx.Exec(ctx, `INSERT INTO usage_hours (sandbox_id, team_id, hour, cpu_s,
				memory_gib_s, storage_gib_h, egress_bytes, cost_usd, gpu_s) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
				ON CONFLICT (sandbox_id, hour) DO UPDATE SET team_id = excluded.team_id, cpu_s = excluded.cpu_s,
					memory_gib_s = excluded.memory_gib_s, storage_gib_h = excluded.storage_gib_h,
					egress_bytes = excluded.egress_bytes, cost_usd = excluded.cost_usd, gpu_s = excluded.gpu_s`,
				a.SandboxID, a.TeamID, a.Hour.Truncate(time.Hour), a.CPUS, a.MemoryGiBS, a.StorageGiBH, a.EgressBytes, a.CostUSD, a.GPUS)
			if err != nil {
				return fmt.Errorf("put usage of workload %s: %w", a.SandboxID, err)
			}
		}
		return nil
	})
}
