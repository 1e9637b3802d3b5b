package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/store"
)

// AllocIDRange gives sandboxID the lowest free range at first + k·size,
// k < count, or returns the one it holds. The write connection's
// immediate transaction makes the search and the insert one step.
func (db *DB) AllocIDRange(ctx context.Context, sandboxID string, first, size uint32, count int) (store.IDRange, error) {
	if size == 0 || count <= 0 {
		return store.IDRange{}, fmt.Errorf("allocate id range for %s: size %d, count %d", sandboxID, size, count)
	}
	tx, err := db.write.BeginTx(ctx, nil)
	if err != nil {
		return store.IDRange{}, fmt.Errorf("allocate id range for %s: %w", sandboxID, err)
	}
	defer tx.Rollback()
	r := store.IDRange{SandboxID: sandboxID}
	err = tx.QueryRowContext(ctx, "SELECT host_id, size FROM id_ranges WHERE sandbox_id = ?", sandboxID).Scan(&r.HostID, &r.Size)
	if err == nil {
		return r, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return store.IDRange{}, fmt.Errorf("allocate id range for %s: %w", sandboxID, err)
	}
	// The lowest free slot is 0 or just after a held one.
	var k int64
	err = tx.QueryRowContext(ctx, `
		SELECT k FROM (
			SELECT 0 AS k
			UNION
			SELECT (host_id - :first) / :size + 1 FROM id_ranges
			WHERE host_id >= :first AND (host_id - :first) % :size = 0
		) AS c
		WHERE k < :count AND NOT EXISTS (SELECT 1 FROM id_ranges WHERE host_id = :first + c.k * :size)
		ORDER BY k LIMIT 1`,
		sql.Named("first", int64(first)), sql.Named("size", int64(size)), sql.Named("count", int64(count))).Scan(&k)
	if errors.Is(err, sql.ErrNoRows) {
		return store.IDRange{}, api.Errorf(api.CodeResourceExhausted, "all %d host uid ranges are held by sandboxes; try again when sandboxes end", count)
	}
	if err != nil {
		return store.IDRange{}, fmt.Errorf("allocate id range for %s: %w", sandboxID, err)
	}
	r.HostID, r.Size = first+uint32(k)*size, size
	if _, err := tx.ExecContext(ctx, "INSERT INTO id_ranges (sandbox_id, host_id, size) VALUES (?, ?, ?)",
		sandboxID, int64(r.HostID), int64(r.Size)); err != nil {
		return store.IDRange{}, fmt.Errorf("allocate id range for %s: %w", sandboxID, err)
	}
	if err := tx.Commit(); err != nil {
		return store.IDRange{}, fmt.Errorf("allocate id range for %s: %w", sandboxID, err)
	}
	return r, nil
}

// GetIDRange returns the range sandboxID holds.
func (db *DB) GetIDRange(ctx context.Context, sandboxID string) (store.IDRange, error) {
	r := store.IDRange{SandboxID: sandboxID}
	err := db.read.QueryRowContext(ctx, "SELECT host_id, size FROM id_ranges WHERE sandbox_id = ?", sandboxID).Scan(&r.HostID, &r.Size)
	if errors.Is(err, sql.ErrNoRows) {
		return store.IDRange{}, api.Errorf(api.CodeNotFound, "sandbox %s holds no id range", sandboxID)
	}
	if err != nil {
		return store.IDRange{}, fmt.Errorf("get id range of %s: %w", sandboxID, err)
	}
	return r, nil
}

// ReleaseIDRange frees sandboxID's range, if it holds one.
func (db *DB) ReleaseIDRange(ctx context.Context, sandboxID string) error {
	if _, err := db.write.ExecContext(ctx, "DELETE FROM id_ranges WHERE sandbox_id = ?", sandboxID); err != nil {
		return fmt.Errorf("release id range of %s: %w", sandboxID, err)
	}
	return nil
}

// ListIDRanges returns every held range by host ID.
func (db *DB) ListIDRanges(ctx context.Context) ([]store.IDRange, error) {
	rs, err := queryAll(ctx, db.read, func(r scanner) (store.IDRange, error) {
		var x store.IDRange
		err := r.Scan(&x.SandboxID, &x.HostID, &x.Size)
		return x, err
	}, "SELECT sandbox_id, host_id, size FROM id_ranges ORDER BY host_id")
	if err != nil {
		return nil, fmt.Errorf("list id ranges: %w", err)
	}
	return rs, nil
}
