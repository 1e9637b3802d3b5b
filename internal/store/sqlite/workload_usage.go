package sqlite

import (
	"context"
	"fmt"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/store"
)

var _ store.WorkloadUsage = (*DB)(nil)

// PutWorkloadUsage sets a workload's usage per hour, in one transaction.
func (db *DB) PutWorkloadUsage(ctx context.Context, accruals []store.Accrual) error {
	if len(accruals) == 0 {
		return nil
	}
	tx, err := db.write.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	put, err := tx.PrepareContext(ctx, `INSERT OR REPLACE INTO usage_hours (sandbox_id, team_id, hour, cpu_s,
		memory_gib_s, storage_gib_h, egress_bytes, cost_usd, gpu_s) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`)
	if err != nil {
		return err
	}
	defer put.Close()
	for _, a := range accruals {
		if a.SandboxID == "" || a.TeamID == "" {
			return api.Errorf(api.CodeInvalidArgument, "workload usage needs a workload and a team")
		}
		if _, err := put.ExecContext(ctx, a.SandboxID, a.TeamID, formatTime(a.Hour.Truncate(time.Hour)),
			a.CPUS, a.MemoryGiBS, a.StorageGiBH, a.EgressBytes, a.CostUSD, a.GPUS); err != nil {
			return fmt.Errorf("put usage of workload %s: %w", a.SandboxID, err)
		}
	}
	return tx.Commit()
}
