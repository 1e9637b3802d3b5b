package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/store"
)

// AllocIDRange gives sandboxID the lowest free range at first + k·size,
// k < count, or returns the one it holds. An advisory lock held to the
// transaction's end makes the search and the insert one step across
// replicas.
func (db *DB) AllocIDRange(ctx context.Context, sandboxID string, first, size uint32, count int) (store.IDRange, error) {
	if size == 0 || count <= 0 {
		return store.IDRange{}, fmt.Errorf("allocate id range for %s: size %d, count %d", sandboxID, size, count)
	}
	r := store.IDRange{SandboxID: sandboxID}
	err := db.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1, 0)", lockIDRanges); err != nil {
			return err
		}
		err := tx.QueryRow(ctx, "SELECT host_id, size FROM id_ranges WHERE sandbox_id = $1", sandboxID).Scan(&r.HostID, &r.Size)
		if err == nil || !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		// The lowest free slot is 0 or just after a held one.
		var k int64
		err = tx.QueryRow(ctx, `
			SELECT k FROM (
				SELECT 0::bigint AS k
				UNION
				SELECT (host_id - @first) / @size + 1 FROM id_ranges
				WHERE host_id >= @first AND (host_id - @first) % @size = 0
			) AS c
			WHERE k < @count AND NOT EXISTS (SELECT 1 FROM id_ranges WHERE host_id = @first + c.k * @size)
			ORDER BY k LIMIT 1`,
			pgx.NamedArgs{"first": int64(first), "size": int64(size), "count": int64(count)}).Scan(&k)
		if errors.Is(err, pgx.ErrNoRows) {
			return api.Errorf(api.CodeResourceExhausted, "all %d host uid ranges are held by sandboxes; try again when sandboxes end", count)
		}
		if err != nil {
			return err
		}
		r.HostID, r.Size = first+uint32(k)*size, size
		_, err = tx.Exec(ctx, "INSERT INTO id_ranges (sandbox_id, host_id, size) VALUES ($1, $2, $3)",
			sandboxID, int64(r.HostID), int64(r.Size))
		return err
	})
	if ae := (*api.Error)(nil); errors.As(err, &ae) {
		return store.IDRange{}, err
	}
	if err != nil {
		return store.IDRange{}, fmt.Errorf("allocate id range for %s: %w", sandboxID, err)
	}
	return r, nil
}

// GetIDRange returns the range sandboxID holds.
func (db *DB) GetIDRange(ctx context.Context, sandboxID string) (store.IDRange, error) {
	r := store.IDRange{SandboxID: sandboxID}
	err := db.pool.QueryRow(ctx, "SELECT host_id, size FROM id_ranges WHERE sandbox_id = $1", sandboxID).Scan(&r.HostID, &r.Size)
	if errors.Is(err, pgx.ErrNoRows) {
		return store.IDRange{}, api.Errorf(api.CodeNotFound, "sandbox %s holds no id range", sandboxID)
	}
	if err != nil {
		return store.IDRange{}, fmt.Errorf("get id range of %s: %w", sandboxID, err)
	}
	return r, nil
}

// ReleaseIDRange frees sandboxID's range, if it holds one.
func (db *DB) ReleaseIDRange(ctx context.Context, sandboxID string) error {
	if _, err := db.pool.Exec(ctx, "DELETE FROM id_ranges WHERE sandbox_id = $1", sandboxID); err != nil {
		return fmt.Errorf("release id range of %s: %w", sandboxID, err)
	}
	return nil
}

// ListIDRanges returns every held range by host ID.
func (db *DB) ListIDRanges(ctx context.Context) ([]store.IDRange, error) {
	rs, err := queryAll(ctx, db.pool, func(r scanner) (store.IDRange, error) {
		var x store.IDRange
		err := r.Scan(&x.SandboxID, &x.HostID, &x.Size)
		return x, err
	}, "SELECT sandbox_id, host_id, size FROM id_ranges ORDER BY host_id")
	if err != nil {
		return nil, fmt.Errorf("list id ranges: %w", err)
	}
	return rs, nil
}
