package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cove-dev/cove/internal/store"
)

var _ store.Replicas = (*DB)(nil)

// AcquireLease takes or renews a lease in one conditional upsert on the
// database's clock (now(), the transaction's start), so that replicas
// whose hosts' clocks differ agree on its expiry. Two replicas racing for
// a free lease: the second waits on the first's row and then finds it
// held.
func (db *DB) AcquireLease(ctx context.Context, name, holder string, ttl time.Duration) (store.Lease, error) {
	l := store.Lease{Name: name}
	// The upsert changes nothing while the lease is another's and runs;
	// the lease as it then stands is read after it.
	_, err := db.pool.Exec(ctx, `INSERT INTO leases AS l (name, holder, term, expires_at)
		VALUES ($1, $2, 1, now() + $3 * interval '1 microsecond')
		ON CONFLICT (name) DO UPDATE SET holder = $2, expires_at = now() + $3 * interval '1 microsecond',
			term = CASE WHEN l.holder = $2 THEN l.term ELSE l.term + 1 END
		WHERE l.holder = $2 OR l.expires_at <= now()`,
		name, holder, ttl.Microseconds())
	if err != nil {
		return l, fmt.Errorf("acquire lease %s: %w", name, err)
	}
	err = db.pool.QueryRow(ctx, "SELECT holder, term, expires_at FROM leases WHERE name = $1", name).
		Scan(&l.Holder, &l.Term, &l.ExpiresAt)
	if err != nil {
		return l, fmt.Errorf("read lease %s: %w", name, err)
	}
	return l, nil
}

// ReleaseLease expires holder's lease now.
func (db *DB) ReleaseLease(ctx context.Context, name, holder string) error {
	if _, err := db.pool.Exec(ctx, "UPDATE leases SET expires_at = now() WHERE name = $1 AND holder = $2", name, holder); err != nil {
		return fmt.Errorf("release lease %s: %w", name, err)
	}
	return nil
}

// BeatReplica records a replica's beat on the database's clock.
func (db *DB) BeatReplica(ctx context.Context, r store.Replica) error {
	_, err := db.pool.Exec(ctx, `INSERT INTO replicas (id, addr, started_at, seen_at) VALUES ($1, $2, $3, now())
		ON CONFLICT (id) DO UPDATE SET addr = $2, started_at = $3, seen_at = now()`, r.ID, r.Addr, r.StartedAt)
	if err != nil {
		return fmt.Errorf("beat replica %s: %w", r.ID, err)
	}
	return nil
}

// ListReplicas lists the replicas by ID.
func (db *DB) ListReplicas(ctx context.Context) ([]store.Replica, error) {
	rows, err := db.pool.Query(ctx, "SELECT id, addr, started_at, seen_at FROM replicas ORDER BY id")
	if err != nil {
		return nil, fmt.Errorf("list replicas: %w", err)
	}
	defer rows.Close()
	out := []store.Replica{}
	for rows.Next() {
		var r store.Replica
		if err := rows.Scan(&r.ID, &r.Addr, &r.StartedAt, &r.SeenAt); err != nil {
			return nil, fmt.Errorf("list replicas: %w", err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list replicas: %w", err)
	}
	return out, nil
}

// PruneReplicas deletes the replicas last seen before seenBefore.
func (db *DB) PruneReplicas(ctx context.Context, seenBefore time.Time) (int64, error) {
	tag, err := db.pool.Exec(ctx, "DELETE FROM replicas WHERE seen_at < $1", seenBefore)
	if err != nil {
		return 0, fmt.Errorf("prune replicas: %w", err)
	}
	return tag.RowsAffected(), nil
}

// PruneSandboxOwners deletes the claims of ended or missing sandboxes.
func (db *DB) PruneSandboxOwners(ctx context.Context) (int64, error) {
	tag, err := db.pool.Exec(ctx, `DELETE FROM sandbox_owners o WHERE NOT EXISTS (
		SELECT 1 FROM sandboxes s WHERE s.id = o.sandbox_id AND s.state NOT IN ('terminated', 'failed'))`)
	if err != nil {
		return 0, fmt.Errorf("prune sandbox owners: %w", err)
	}
	return tag.RowsAffected(), nil
}

// ClaimSandbox records the replica driving a sandbox's transition.
func (db *DB) ClaimSandbox(ctx context.Context, sandboxID, replicaID string) error {
	_, err := db.pool.Exec(ctx, `INSERT INTO sandbox_owners (sandbox_id, replica_id) VALUES ($1, $2)
		ON CONFLICT (sandbox_id) DO UPDATE SET replica_id = $2`, sandboxID, replicaID)
	if err != nil {
		return fmt.Errorf("claim sandbox %s: %w", sandboxID, err)
	}
	return nil
}

// SandboxOwner returns the replica that claimed a sandbox last.
func (db *DB) SandboxOwner(ctx context.Context, sandboxID string) (string, error) {
	var id string
	err := db.pool.QueryRow(ctx, "SELECT replica_id FROM sandbox_owners WHERE sandbox_id = $1", sandboxID).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read the owner of sandbox %s: %w", sandboxID, err)
	}
	return id, nil
}

// ClaimDelivery takes a due delivery for one attempt, conditionally: of
// two dispatchers, the second waits on the first's row lock and then finds
// the condition false.
func (db *DB) ClaimDelivery(ctx context.Context, id string, attempts int, now, until time.Time) (bool, error) {
	seq, ok := deliverySeq(id)
	if !ok {
		return false, nil
	}
	tag, err := db.pool.Exec(ctx, `UPDATE webhook_deliveries SET next_attempt_at = $1
		WHERE seq = $2 AND state = 'pending' AND attempt_count = $3 AND (next_attempt_at IS NULL OR next_attempt_at <= $4)`,
		until, seq, attempts, now)
	if err != nil {
		return false, fmt.Errorf("claim delivery %s: %w", id, err)
	}
	return tag.RowsAffected() == 1, nil
}
