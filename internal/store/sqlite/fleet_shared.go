package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/store"
)

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
	res, err := db.write.ExecContext(ctx, `UPDATE nodes SET heartbeat_at = ?, capacity = ?, gpu_names = ?, templates = ?, join_hash = ''
		WHERE id = ? AND epoch = ? AND state IN ('ready', 'draining')`,
		formatTime(b.At), capacity, gpus, templates, b.ID, b.Epoch)
	if err != nil {
		return fmt.Errorf("heartbeat of node %s: %w", b.ID, err)
	}
	if n, _ := res.RowsAffected(); n == 1 {
		return nil
	}
	n, err := db.GetNode(ctx, b.ID)
	if err != nil {
		return err
	}
	return api.Errorf(api.CodeConflict, "node %s is %s in epoch %d, not live in epoch %d", b.ID, n.State, n.Epoch, b.Epoch)
}

// AdmitPlacement stores p if its node is ready in p.Epoch and has room
// within limit. The write pool's transactions begin IMMEDIATE: the check
// and the write hold the database's one write lock together.
func (db *DB) AdmitPlacement(ctx context.Context, p store.Placement, limit api.Resources) error {
	res, err := encodeJSON(p.Resources)
	if err != nil {
		return err
	}
	tx, err := db.write.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("admit placement of %s: %w", p.SandboxID, err)
	}
	defer tx.Rollback()
	var state string
	var epoch int64
	err = tx.QueryRowContext(ctx, "SELECT state, epoch FROM nodes WHERE id = ?", p.NodeID).Scan(&state, &epoch)
	if errors.Is(err, sql.ErrNoRows) {
		return api.Errorf(api.CodeNotFound, "node %s not found", p.NodeID)
	}
	if err != nil {
		return fmt.Errorf("admit placement of %s: %w", p.SandboxID, err)
	}
	if api.NodeState(state) != api.NodeReady || epoch != p.Epoch {
		return api.Errorf(api.CodeConflict, "node %s is %s in epoch %d: it takes no sandbox in epoch %d", p.NodeID, state, epoch, p.Epoch)
	}
	var cpus float64
	var mem int64
	err = tx.QueryRowContext(ctx, `SELECT COALESCE(SUM(json_extract(resources, '$.cpus')), 0),
		COALESCE(SUM(json_extract(resources, '$.memory_mib')), 0)
		FROM placements WHERE node_id = ? AND sandbox_id != ?`, p.NodeID, p.SandboxID).Scan(&cpus, &mem)
	if err != nil {
		return fmt.Errorf("admit placement of %s: %w", p.SandboxID, err)
	}
	if err := store.CheckRoom(p, cpus, mem, limit); err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, "INSERT OR REPLACE INTO placements ("+placementColumns+") VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
		p.SandboxID, p.NodeID, p.Epoch, res, p.Save, p.SaveNodeID, p.SaveBytes, nullTime(p.SavedAt))
	if err != nil {
		return fmt.Errorf("admit placement of %s: %w", p.SandboxID, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("admit placement of %s: %w", p.SandboxID, err)
	}
	return nil
}
