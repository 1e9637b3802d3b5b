package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/store"
)

const nodeColumns = "id, name, addr, state, epoch, capacity, gpu_names, templates, registered_at, heartbeat_at, created_at, join_hash"

func scanNode(r scanner) (store.Node, error) {
	var n store.Node
	var state, capacity, gpus, templates string
	if err := r.Scan(&n.ID, &n.Name, &n.Addr, &state, &n.Epoch, &capacity, &gpus, &templates,
		&n.RegisteredAt, &n.HeartbeatAt, &n.CreatedAt, &n.JoinHash); err != nil {
		return store.Node{}, err
	}
	var d decoder
	n.State = api.NodeState(state)
	d.json(capacity, &n.Capacity)
	d.json(gpus, &n.GPUNames)
	d.json(templates, &n.Templates)
	n.GPUNames, n.Templates = nonNilStrings(n.GPUNames), nonNilStrings(n.Templates)
	return n, d.err
}

func nodeConflict(n store.Node, err error) error {
	switch violation(err) {
	case "primary":
		return api.Errorf(api.CodeConflict, "node %s already exists", n.ID)
	case "unique":
		return api.Errorf(api.CodeConflict, "a node named %q is already registered", n.Name)
	}
	return nil
}

// CreateNode stores a new node.
func (db *DB) CreateNode(ctx context.Context, n store.Node) error {
	capacity, err := encodeJSON(n.Capacity)
	if err != nil {
		return err
	}
	gpus, templates, err := nodeLists(n.GPUNames, n.Templates)
	if err != nil {
		return err
	}
	_, err = db.pool.Exec(ctx, "INSERT INTO nodes ("+nodeColumns+") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
		n.ID, n.Name, n.Addr, string(n.State), n.Epoch, capacity, gpus, templates, n.RegisteredAt, n.HeartbeatAt, n.CreatedAt, n.JoinHash)
	if e := nodeConflict(n, err); e != nil {
		return e
	}
	if err != nil {
		return fmt.Errorf("insert node %s: %w", n.ID, err)
	}
	return nil
}

// GetNode finds a node by ID.
func (db *DB) GetNode(ctx context.Context, id string) (store.Node, error) {
	n, err := scanNode(db.pool.QueryRow(ctx, "SELECT "+nodeColumns+" FROM nodes WHERE id = $1", id))
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Node{}, api.Errorf(api.CodeNotFound, "node %s not found", id)
	}
	if err != nil {
		return store.Node{}, fmt.Errorf("get node %s: %w", id, err)
	}
	return n, nil
}

// UpdateNode replaces a node's fields.
func (db *DB) UpdateNode(ctx context.Context, n store.Node) error {
	capacity, err := encodeJSON(n.Capacity)
	if err != nil {
		return err
	}
	gpus, templates, err := nodeLists(n.GPUNames, n.Templates)
	if err != nil {
		return err
	}
	tag, err := db.pool.Exec(ctx, `UPDATE nodes SET name = $1, addr = $2, state = $3, epoch = $4, capacity = $5,
		gpu_names = $6, templates = $7, registered_at = $8, heartbeat_at = $9, created_at = $10, join_hash = $11 WHERE id = $12`,
		n.Name, n.Addr, string(n.State), n.Epoch, capacity, gpus, templates, n.RegisteredAt, n.HeartbeatAt, n.CreatedAt, n.JoinHash, n.ID)
	if e := nodeConflict(n, err); e != nil {
		return e
	}
	if err != nil {
		return fmt.Errorf("update node %s: %w", n.ID, err)
	}
	return mustAffect(tag, api.Errorf(api.CodeNotFound, "node %s not found", n.ID))
}

// ListNodes lists every node, oldest first.
func (db *DB) ListNodes(ctx context.Context) ([]store.Node, error) {
	ns, err := queryAll(ctx, db.pool, scanNode, "SELECT "+nodeColumns+" FROM nodes ORDER BY created_at, id")
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	return ns, nil
}

const placementColumns = "sandbox_id, node_id, epoch, resources, save, save_node_id, save_bytes, saved_at"

func scanPlacement(r scanner) (store.Placement, error) {
	var p store.Placement
	var res string
	if err := r.Scan(&p.SandboxID, &p.NodeID, &p.Epoch, &res, &p.Save, &p.SaveNodeID, &p.SaveBytes, &p.SavedAt); err != nil {
		return store.Placement{}, err
	}
	var d decoder
	d.json(res, &p.Resources)
	return p, d.err
}

// PutPlacement creates or replaces a sandbox's placement.
func (db *DB) PutPlacement(ctx context.Context, p store.Placement) error {
	res, err := encodeJSON(p.Resources)
	if err != nil {
		return err
	}
	_, err = db.pool.Exec(ctx, "INSERT INTO placements ("+placementColumns+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
		ON CONFLICT (sandbox_id) DO UPDATE SET node_id = excluded.node_id, epoch = excluded.epoch,
			resources = excluded.resources, save = excluded.save, save_node_id = excluded.save_node_id,
			save_bytes = excluded.save_bytes, saved_at = excluded.saved_at`,
		p.SandboxID, p.NodeID, p.Epoch, res, p.Save, p.SaveNodeID, p.SaveBytes, p.SavedAt)
	if err != nil {
		return fmt.Errorf("put placement of %s: %w", p.SandboxID, err)
	}
	return nil
}

// GetPlacement finds a sandbox's placement.
func (db *DB) GetPlacement(ctx context.Context, sandboxID string) (store.Placement, error) {
	p, err := scanPlacement(db.pool.QueryRow(ctx, "SELECT "+placementColumns+" FROM placements WHERE sandbox_id = $1", sandboxID))
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Placement{}, api.Errorf(api.CodeNotFound, "sandbox %s is placed nowhere", sandboxID)
	}
	if err != nil {
		return store.Placement{}, fmt.Errorf("get placement of %s: %w", sandboxID, err)
	}
	return p, nil
}

// DeletePlacement forgets a sandbox's placement.
func (db *DB) DeletePlacement(ctx context.Context, sandboxID string) error {
	if _, err := db.pool.Exec(ctx, "DELETE FROM placements WHERE sandbox_id = $1", sandboxID); err != nil {
		return fmt.Errorf("delete placement of %s: %w", sandboxID, err)
	}
	return nil
}

// ListPlacements lists the placements on a node, or all of them.
func (db *DB) ListPlacements(ctx context.Context, nodeID string) ([]store.Placement, error) {
	var w where
	if nodeID != "" {
		w.add("node_id = ?", nodeID)
	}
	ps, err := queryAll(ctx, db.pool, scanPlacement, "SELECT "+placementColumns+" FROM placements"+w.clause()+" ORDER BY sandbox_id", w.args...)
	if err != nil {
		return nil, fmt.Errorf("list placements: %w", err)
	}
	return ps, nil
}

// FleetValue returns a named value of the join service.
func (db *DB) FleetValue(ctx context.Context, name string) (string, error) {
	var v string
	err := db.pool.QueryRow(ctx, "SELECT value FROM fleet_values WHERE name = $1", name).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", api.Errorf(api.CodeNotFound, "fleet value %s not found", name)
	}
	if err != nil {
		return "", fmt.Errorf("get fleet value %s: %w", name, err)
	}
	return v, nil
}

// CreateFleetValue creates a named value that does not exist yet; one
// that does answers CodeConflict (replicas starting at once agree on the
// first one written).
func (db *DB) CreateFleetValue(ctx context.Context, name, value string) error {
	tag, err := db.pool.Exec(ctx, "INSERT INTO fleet_values (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING", name, value)
	if err != nil {
		return fmt.Errorf("create fleet value %s: %w", name, err)
	}
	if tag.RowsAffected() == 0 {
		return api.Errorf(api.CodeConflict, "fleet value %s exists", name)
	}
	return nil
}

// PutFleetValue creates or replaces a named value.
func (db *DB) PutFleetValue(ctx context.Context, name, value string) error {
	_, err := db.pool.Exec(ctx, `INSERT INTO fleet_values (name, value) VALUES ($1, $2)
		ON CONFLICT (name) DO UPDATE SET value = excluded.value`, name, value)
	if err != nil {
		return fmt.Errorf("put fleet value %s: %w", name, err)
	}
	return nil
}
