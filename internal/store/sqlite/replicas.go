package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/cove-dev/cove/internal/store"
)

var _ store.Replicas = (*DB)(nil)

// AcquireLease takes or renews a lease in one conditional upsert. SQLite
// is one file on one host: the store's clock is this process's.
func (db *DB) AcquireLease(ctx context.Context, name, holder string, ttl time.Duration) (store.Lease, error) {
	now := db.now().UTC()
	tx, err := db.write.BeginTx(ctx, nil)
	if err != nil {
		return store.Lease{}, err
	}
	defer tx.Rollback()
	// The SET expressions read the row as it was: the term moves only
	// when the holder changes.
	_, err = tx.ExecContext(ctx, `INSERT INTO leases (name, holder, term, expires_at) VALUES (?1, ?2, 1, ?3)
		ON CONFLICT (name) DO UPDATE SET holder = ?2, expires_at = ?3,
			term = CASE WHEN leases.holder = ?2 THEN leases.term ELSE leases.term + 1 END
		WHERE leases.holder = ?2 OR leases.expires_at <= ?4`,
		name, holder, formatTime(now.Add(ttl)), formatTime(now))
	if err != nil {
		return store.Lease{}, fmt.Errorf("acquire lease %s: %w", name, err)
	}
	l := store.Lease{Name: name}
	var expires string
	if err := tx.QueryRowContext(ctx, "SELECT holder, term, expires_at FROM leases WHERE name = ?", name).
		Scan(&l.Holder, &l.Term, &expires); err != nil {
		return store.Lease{}, fmt.Errorf("read lease %s: %w", name, err)
	}
	var d decoder
	l.ExpiresAt = d.time(expires)
	if d.err != nil {
		return store.Lease{}, d.err
	}
	return l, tx.Commit()
}

// ReleaseLease expires holder's lease now.
func (db *DB) ReleaseLease(ctx context.Context, name, holder string) error {
	_, err := db.write.ExecContext(ctx, "UPDATE leases SET expires_at = ? WHERE name = ? AND holder = ?",
		formatTime(db.now()), name, holder)
	if err != nil {
		return fmt.Errorf("release lease %s: %w", name, err)
	}
	return nil
}

// BeatReplica records a replica's beat.
func (db *DB) BeatReplica(ctx context.Context, r store.Replica) error {
	_, err := db.write.ExecContext(ctx, `INSERT INTO replicas (id, addr, started_at, seen_at) VALUES (?1, ?2, ?3, ?4)
		ON CONFLICT (id) DO UPDATE SET addr = ?2, started_at = ?3, seen_at = ?4`,
		r.ID, r.Addr, formatTime(r.StartedAt), formatTime(db.now()))
	if err != nil {
		return fmt.Errorf("beat replica %s: %w", r.ID, err)
	}
	return nil
}

// ListReplicas lists the replicas by ID.
func (db *DB) ListReplicas(ctx context.Context) ([]store.Replica, error) {
	out, err := queryAll(ctx, db.read, func(r scanner) (store.Replica, error) {
		var rep store.Replica
		var started, seen string
		if err := r.Scan(&rep.ID, &rep.Addr, &started, &seen); err != nil {
			return rep, err
		}
		var d decoder
		rep.StartedAt, rep.SeenAt = d.time(started), d.time(seen)
		return rep, d.err
	}, "SELECT id, addr, started_at, seen_at FROM replicas ORDER BY id")
	if err != nil {
		return nil, fmt.Errorf("list replicas: %w", err)
	}
	return out, nil
}

// PruneReplicas deletes the replicas last seen before seenBefore.
func (db *DB) PruneReplicas(ctx context.Context, seenBefore time.Time) (int64, error) {
	res, err := db.write.ExecContext(ctx, "DELETE FROM replicas WHERE seen_at < ?", formatTime(seenBefore))
	if err != nil {
		return 0, fmt.Errorf("prune replicas: %w", err)
	}
	return res.RowsAffected()
}

// PruneSandboxOwners deletes the claims of ended or missing sandboxes.
func (db *DB) PruneSandboxOwners(ctx context.Context) (int64, error) {
	res, err := db.write.ExecContext(ctx, `DELETE FROM sandbox_owners WHERE NOT EXISTS (
		SELECT 1 FROM sandboxes s WHERE s.id = sandbox_owners.sandbox_id AND s.state NOT IN ('terminated', 'failed'))`)
	if err != nil {
		return 0, fmt.Errorf("prune sandbox owners: %w", err)
	}
	return res.RowsAffected()
}

// ClaimSandbox records the replica driving a sandbox's transition.
func (db *DB) ClaimSandbox(ctx context.Context, sandboxID, replicaID string) error {
	_, err := db.write.ExecContext(ctx, `INSERT INTO sandbox_owners (sandbox_id, replica_id) VALUES (?1, ?2)
		ON CONFLICT (sandbox_id) DO UPDATE SET replica_id = ?2`, sandboxID, replicaID)
	if err != nil {
		return fmt.Errorf("claim sandbox %s: %w", sandboxID, err)
	}
	return nil
}

// SandboxOwner returns the replica that claimed a sandbox last.
func (db *DB) SandboxOwner(ctx context.Context, sandboxID string) (string, error) {
	var id string
	err := db.read.QueryRowContext(ctx, "SELECT replica_id FROM sandbox_owners WHERE sandbox_id = ?", sandboxID).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read the owner of sandbox %s: %w", sandboxID, err)
	}
	return id, nil
}

// ClaimDelivery takes a due delivery for one attempt, conditionally.
func (db *DB) ClaimDelivery(ctx context.Context, id string, attempts int, now, until time.Time) (bool, error) {
	seq, ok := deliverySeq(id)
	if !ok {
		return false, nil
	}
	res, err := db.write.ExecContext(ctx, `UPDATE webhook_deliveries SET next_attempt_at = ?
		WHERE seq = ? AND state = 'pending' AND attempt_count = ? AND (next_attempt_at IS NULL OR next_attempt_at <= ?)`,
		formatTime(until), seq, attempts, formatTime(now))
	if err != nil {
		return false, fmt.Errorf("claim delivery %s: %w", id, err)
	}
	n, err := res.RowsAffected()
	return n == 1, err
}
