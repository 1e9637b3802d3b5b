package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/store"
)

func nonNilStrings(xs []string) []string {
	if xs == nil {
		return []string{}
	}
	return xs
}

// nodeLists encodes a node's GPU names and templates.
func nodeLists(gpus, templates []string) (string, string, error) {
	g, err := encodeJSON(nonNilStrings(gpus))
	if err != nil {
		return "", "", err
	}
	t, err := encodeJSON(nonNilStrings(templates))
	return g, t, err
}

// BeatNode records a node's heartbeat if it is ready or draining in the
// epoch it names, and spends its join nonce's hash.
func (db *DB) BeatNode(ctx context.Context, b store.NodeBeat) error {
	capacity, err := encodeJSON(b.Capacity)
	if err != nil {
		return err
	}
	gpus, templates, err := nodeLists(b.GPUNames, b.Templates)
	if err != nil {
		return err
	}
	tag, err := db.pool.Exec(ctx, `UPDATE nodes SET heartbeat_at = $1, capacity = $2, gpu_names = $3, templates = $4, join_hash = ''
		WHERE id = $5 AND epoch = $6 AND state IN ('ready', 'draining')`,
		b.At, capacity, gpus, templates, b.ID, b.Epoch)
	if err != nil {
		return fmt.Errorf("heartbeat of node %s: %w", b.ID, err)
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	n, err := db.GetNode(ctx, b.ID)
	if err != nil {
		return err
	}
	return api.Errorf(api.CodeConflict, "node %s is %s in epoch %d, not live in epoch %d", b.ID, n.State, n.Epoch, b.Epoch)
}

// AdmitPlacement stores p if its node is ready in p.Epoch and has room
// within limit. The node's row is locked (FOR UPDATE) for the check and
// the write: admissions on one node, from any replica, go one at a time;
// on different nodes they do not wait for each other.
func (db *DB) AdmitPlacement(ctx context.Context, p store.Placement, limit api.Resources) error {
	res, err := encodeJSON(p.Resources)
	if err != nil {
		return err
	}
	err = db.inTx(ctx, func(tx pgx.Tx) error {
		var state string
		var epoch int64
		err := tx.QueryRow(ctx, "SELECT state, epoch FROM nodes WHERE id = $1 FOR UPDATE", p.NodeID).Scan(&state, &epoch)
		if errors.Is(err, pgx.ErrNoRows) {
			return api.Errorf(api.CodeNotFound, "node %s not found", p.NodeID)
		}
		if err != nil {
			return err
		}
		if api.NodeState(state) != api.NodeReady || epoch != p.Epoch {
			return api.Errorf(api.CodeConflict, "node %s is %s in epoch %d: it takes no sandbox in epoch %d", p.NodeID, state, epoch, p.Epoch)
		}
		var cpus float64
		var mem int64
		err = tx.QueryRow(ctx, `SELECT COALESCE(SUM((resources->>'cpus')::float8), 0),
			COALESCE(SUM((resources->>'memory_mib')::bigint), 0)::bigint
			FROM placements WHERE node_id = $1 AND sandbox_id <> $2`, p.NodeID, p.SandboxID).Scan(&cpus, &mem)
		if err != nil {
			return err
		}
		if err := store.CheckRoom(p, cpus, mem, limit); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, "INSERT INTO placements ("+placementColumns+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
			ON CONFLICT (sandbox_id) DO UPDATE SET node_id = excluded.node_id, epoch = excluded.epoch,
				resources = excluded.resources, save = excluded.save, save_node_id = excluded.save_node_id,
				save_bytes = excluded.save_bytes, saved_at = excluded.saved_at`,
			p.SandboxID, p.NodeID, p.Epoch, res, p.Save, p.SaveNodeID, p.SaveBytes, p.SavedAt)
		return err
	})
	var coded *api.Error
	if err != nil && !errors.As(err, &coded) {
		return fmt.Errorf("admit placement of %s: %w", p.SandboxID, err)
	}
	return err
}
