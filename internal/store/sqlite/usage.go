package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/store"
)

var _ store.Usage = (*DB)(nil)

// AppendSamples stores raw samples and folds each into its minute.
func (db *DB) AppendSamples(ctx context.Context, samples []store.Sample) error {
	if len(samples) == 0 {
		return nil
	}
	tx, err := db.write.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	raw, err := tx.PrepareContext(ctx, `INSERT OR REPLACE INTO samples (sandbox_id, time, cpu_millicores,
		memory_bytes, memory_peak_bytes, disk_bytes, net_in_bytes, net_out_bytes) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`)
	if err != nil {
		return err
	}
	defer raw.Close()
	minute, err := tx.PrepareContext(ctx, `INSERT INTO sample_minutes (sandbox_id, minute, n,
		cpu_sum, cpu_max, memory_sum, memory_max, memory_peak_max, disk_sum, disk_max, net_in_bytes, net_out_bytes)
		VALUES (?1, ?2, 1, ?3, ?3, ?4, ?4, ?5, ?6, ?6, ?7, ?8)
		ON CONFLICT (sandbox_id, minute) DO UPDATE SET n = n + 1,
			cpu_sum = cpu_sum + ?3, cpu_max = max(cpu_max, ?3),
			memory_sum = memory_sum + ?4, memory_max = max(memory_max, ?4),
			memory_peak_max = max(memory_peak_max, ?5),
			disk_sum = disk_sum + ?6, disk_max = max(disk_max, ?6),
			net_in_bytes = net_in_bytes + ?7, net_out_bytes = net_out_bytes + ?8`)
	if err != nil {
		return err
	}
	defer minute.Close()
	for _, s := range samples {
		if _, err := raw.ExecContext(ctx, s.SandboxID, formatTime(s.Time), s.CPUMillicores, s.MemoryBytes,
			s.MemoryPeakBytes, s.DiskBytes, s.NetInBytes, s.NetOutBytes); err != nil {
			return fmt.Errorf("insert sample of %s: %w", s.SandboxID, err)
		}
		if _, err := minute.ExecContext(ctx, s.SandboxID, formatTime(s.Time.Truncate(time.Minute)), s.CPUMillicores,
			s.MemoryBytes, s.MemoryPeakBytes, s.DiskBytes, s.NetInBytes, s.NetOutBytes); err != nil {
			return fmt.Errorf("roll up sample of %s: %w", s.SandboxID, err)
		}
	}
	return tx.Commit()
}

// ListSamples returns a sandbox's raw samples in (from, to].
func (db *DB) ListSamples(ctx context.Context, sandboxID string, from, to time.Time, limit int) ([]store.Sample, error) {
	q := `SELECT sandbox_id, time, cpu_millicores, memory_bytes, memory_peak_bytes, disk_bytes, net_in_bytes, net_out_bytes
		FROM samples WHERE sandbox_id = ? AND time > ? AND time <= ? ORDER BY time`
	args := []any{sandboxID, formatTime(from), formatTime(to)}
	if limit > 0 {
		q += " LIMIT ?"
		args = append(args, limit)
	}
	out, err := queryAll(ctx, db.read, func(r scanner) (store.Sample, error) {
		var s store.Sample
		var t string
		if err := r.Scan(&s.SandboxID, &t, &s.CPUMillicores, &s.MemoryBytes, &s.MemoryPeakBytes, &s.DiskBytes, &s.NetInBytes, &s.NetOutBytes); err != nil {
			return s, err
		}
		var d decoder
		s.Time = d.time(t)
		return s, d.err
	}, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list samples of %s: %w", sandboxID, err)
	}
	return out, nil
}

// ListMinutes returns a sandbox's rollups with minute in [from, to).
func (db *DB) ListMinutes(ctx context.Context, sandboxID string, from, to time.Time, limit int) ([]store.Minute, error) {
	q := `SELECT sandbox_id, minute, n, cpu_sum, cpu_max, memory_sum, memory_max, memory_peak_max,
		disk_sum, disk_max, net_in_bytes, net_out_bytes
		FROM sample_minutes WHERE sandbox_id = ? AND minute >= ? AND minute < ? ORDER BY minute`
	args := []any{sandboxID, formatTime(from), formatTime(to)}
	if limit > 0 {
		q += " LIMIT ?"
		args = append(args, limit)
	}
	out, err := queryAll(ctx, db.read, func(r scanner) (store.Minute, error) {
		var m store.Minute
		var t string
		if err := r.Scan(&m.SandboxID, &t, &m.N, &m.CPUSum, &m.CPUMax, &m.MemorySum, &m.MemoryMax, &m.MemoryPeakMax,
			&m.DiskSum, &m.DiskMax, &m.NetInBytes, &m.NetOutBytes); err != nil {
			return m, err
		}
		var d decoder
		m.Minute = d.time(t)
		return m, d.err
	}, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list sample rollups of %s: %w", sandboxID, err)
	}
	return out, nil
}

// DeleteSamplesBefore drops raw samples older than raw and rollups older
// than minutes.
func (db *DB) DeleteSamplesBefore(ctx context.Context, raw, minutes time.Time) error {
	if _, err := db.write.ExecContext(ctx, "DELETE FROM samples WHERE time < ?", formatTime(raw)); err != nil {
		return fmt.Errorf("delete samples: %w", err)
	}
	if _, err := db.write.ExecContext(ctx, "DELETE FROM sample_minutes WHERE minute < ?", formatTime(minutes)); err != nil {
		return fmt.Errorf("delete sample rollups: %w", err)
	}
	return nil
}

// AccrueUsage adds accruals to their hours and sandboxes' costs.
func (db *DB) AccrueUsage(ctx context.Context, accruals []store.Accrual) error {
	if len(accruals) == 0 {
		return nil
	}
	tx, err := db.write.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	hours, err := tx.PrepareContext(ctx, `INSERT INTO usage_hours (sandbox_id, team_id, hour, cpu_s, memory_gib_s,
		storage_gib_h, egress_bytes, cost_usd) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
		ON CONFLICT (sandbox_id, hour) DO UPDATE SET cpu_s = cpu_s + ?4, memory_gib_s = memory_gib_s + ?5,
			storage_gib_h = storage_gib_h + ?6, egress_bytes = egress_bytes + ?7, cost_usd = cost_usd + ?8`)
	if err != nil {
		return err
	}
	defer hours.Close()
	cost, err := tx.PrepareContext(ctx, "UPDATE sandboxes SET cost_usd = cost_usd + ? WHERE id = ?")
	if err != nil {
		return err
	}
	defer cost.Close()
	// The meter moves first, and only from the accrual's cursor: a
	// charge another replica already made refuses the whole batch.
	first, err := tx.PrepareContext(ctx, `INSERT INTO meters (sandbox_id, accrued_until) VALUES (?1, ?2)
		ON CONFLICT (sandbox_id) DO UPDATE SET accrued_until = ?2 WHERE meters.accrued_until IS NULL`)
	if err != nil {
		return err
	}
	defer first.Close()
	next, err := tx.PrepareContext(ctx, "UPDATE meters SET accrued_until = ?2 WHERE sandbox_id = ?1 AND accrued_until = ?3")
	if err != nil {
		return err
	}
	defer next.Close()
	for _, a := range accruals {
		var res sql.Result
		if a.Cursor == nil {
			res, err = first.ExecContext(ctx, a.SandboxID, formatTime(a.Until))
		} else {
			res, err = next.ExecContext(ctx, a.SandboxID, formatTime(a.Until), formatTime(*a.Cursor))
		}
		if sqliteCode(err) == foreignKeyViolation {
			return api.Errorf(api.CodeNotFound, "sandbox %s not found", a.SandboxID)
		}
		if err != nil {
			return fmt.Errorf("move meter of %s: %w", a.SandboxID, err)
		}
		if err := mustAffect(res, api.Errorf(api.CodeConflict, "the meter of sandbox %s moved since it was read", a.SandboxID)); err != nil {
			return err
		}
		_, err = hours.ExecContext(ctx, a.SandboxID, a.TeamID, formatTime(a.Hour.Truncate(time.Hour)),
			a.CPUS, a.MemoryGiBS, a.StorageGiBH, a.EgressBytes, a.CostUSD)
		if sqliteCode(err) == foreignKeyViolation {
			return api.Errorf(api.CodeNotFound, "sandbox %s not found", a.SandboxID)
		}
		if err != nil {
			return fmt.Errorf("accrue usage of %s: %w", a.SandboxID, err)
		}
		res, err = cost.ExecContext(ctx, a.CostUSD, a.SandboxID)
		if err != nil {
			return fmt.Errorf("add cost of %s: %w", a.SandboxID, err)
		}
		if err := mustAffect(res, api.Errorf(api.CodeNotFound, "sandbox %s not found", a.SandboxID)); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// GetMeter returns a sandbox's meter.
func (db *DB) GetMeter(ctx context.Context, sandboxID string) (store.Meter, error) {
	var m store.Meter
	var until sql.NullString
	err := db.read.QueryRowContext(ctx, "SELECT accrued_until, stored_bytes FROM meters WHERE sandbox_id = ?", sandboxID).
		Scan(&until, &m.StoredBytes)
	if errors.Is(err, sql.ErrNoRows) {
		return store.Meter{}, nil
	}
	if err != nil {
		return m, fmt.Errorf("get meter of %s: %w", sandboxID, err)
	}
	var d decoder
	m.AccruedUntil = d.timePtr(until)
	return m, d.err
}

// SetStoredBytes records the size of a sandbox's save.
func (db *DB) SetStoredBytes(ctx context.Context, sandboxID string, bytes int64) error {
	_, err := db.write.ExecContext(ctx, `INSERT INTO meters (sandbox_id, stored_bytes) VALUES (?1, ?2)
		ON CONFLICT (sandbox_id) DO UPDATE SET stored_bytes = ?2`, sandboxID, bytes)
	if sqliteCode(err) == foreignKeyViolation {
		return api.Errorf(api.CodeNotFound, "sandbox %s not found", sandboxID)
	}
	if err != nil {
		return fmt.Errorf("set stored bytes of %s: %w", sandboxID, err)
	}
	return nil
}

// SumUsage adds up usage by day, by sandbox or in all.
func (db *DB) SumUsage(ctx context.Context, f store.UsageFilter) ([]api.Usage, error) {
	var w where
	if f.TeamID != "" {
		w.add("team_id = ?", f.TeamID)
	}
	if f.SandboxID != "" {
		w.add("sandbox_id = ?", f.SandboxID)
	}
	if !f.From.IsZero() {
		w.add("hour >= ?", formatTime(f.From))
	}
	if !f.To.IsZero() {
		w.add("hour < ?", formatTime(f.To))
	}
	key, group := "''", ""
	switch f.GroupBy {
	case "day":
		key, group = "substr(hour, 1, 10)", " GROUP BY 1 ORDER BY 1"
	case "sandbox":
		key, group = "sandbox_id", " GROUP BY 1 ORDER BY 1"
	case "":
	default:
		return nil, api.Errorf(api.CodeInvalidArgument, "group_by %q is unknown; use day or sandbox", f.GroupBy)
	}
	q := "SELECT " + key + `, coalesce(sum(cpu_s), 0), coalesce(sum(memory_gib_s), 0), coalesce(sum(storage_gib_h), 0),
		coalesce(sum(egress_bytes), 0), coalesce(sum(cost_usd), 0), coalesce(sum(gpu_s), 0) FROM usage_hours`
	if len(w.conds) > 0 {
		q += " WHERE " + joinAnd(w.conds)
	}
	q += group
	out, err := queryAll(ctx, db.read, func(r scanner) (api.Usage, error) {
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

func joinAnd(conds []string) string {
	q := ""
	for i, c := range conds {
		if i > 0 {
			q += " AND "
		}
		q += c
	}
	return q
}

// GetBudgetState returns a budget's state; unknown keys have a zero one.
func (db *DB) GetBudgetState(ctx context.Context, key string) (store.BudgetState, error) {
	b := store.BudgetState{Key: key, Alerted: []float64{}}
	var alerted string
	err := db.read.QueryRowContext(ctx, "SELECT alerted, exceeded FROM budget_states WHERE key = ?", key).Scan(&alerted, &b.Exceeded)
	if errors.Is(err, sql.ErrNoRows) {
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
	_, err = db.write.ExecContext(ctx, `INSERT INTO budget_states (key, alerted, exceeded) VALUES (?1, ?2, ?3)
		ON CONFLICT (key) DO UPDATE SET alerted = ?2, exceeded = ?3`, b.Key, alerted, b.Exceeded)
	if err != nil {
		return fmt.Errorf("put budget state %s: %w", b.Key, err)
	}
	return nil
}

// UpdateTeam replaces a team's admission and budget.
func (db *DB) UpdateTeam(ctx context.Context, t api.Team) error {
	args, err := teamArgs(t)
	if err != nil {
		return err
	}
	res, err := db.write.ExecContext(ctx, `UPDATE teams SET name = ?2, admission = ?3, created_at = ?4,
		spend_limit_usd = ?5, budget_alerts = ?6 WHERE id = ?1`, args...)
	if sqliteCode(err) == uniqueViolation {
		return api.Errorf(api.CodeConflict, "a team named %s already exists", t.Name)
	}
	if err != nil {
		return fmt.Errorf("update team %s: %w", t.ID, err)
	}
	return mustAffect(res, api.Errorf(api.CodeNotFound, "team %s not found", t.ID))
}
