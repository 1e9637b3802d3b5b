package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/store"
)

const nodeColumns = "id, name, addr, state, epoch, capacity, gpu_names, templates, registered_at, heartbeat_at, created_at, join_hash"

func scanNode(r scanner) (store.Node, error) {
	var n store.Node
	var state, capacity, gpus, templates, created string
	var registered, beat sql.NullString
	if err := r.Scan(&n.ID, &n.Name, &n.Addr, &state, &n.Epoch, &capacity, &gpus, &templates, &registered, &beat, &created, &n.JoinHash); err != nil {
		return store.Node{}, err
	}
	var d decoder
	n.State = api.NodeState(state)
	d.json(capacity, &n.Capacity)
	d.json(gpus, &n.GPUNames)
	d.json(templates, &n.Templates)
	n.GPUNames, n.Templates = nonNilStrings(n.GPUNames), nonNilStrings(n.Templates)
	n.RegisteredAt = d.timePtr(registered)
	n.HeartbeatAt = d.timePtr(beat)
	n.CreatedAt = d.time(created)
	return n, d.err
}

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

func nodeConflict(n store.Node, err error) error {
	switch sqliteCode(err) {
	case primaryKeyViolation:
		return api.Errorf(api.CodeConflict, "node %s already exists", n.ID)
	case uniqueViolation:
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
	_, err = db.write.ExecContext(ctx, "INSERT INTO nodes ("+nodeColumns+") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
		n.ID, n.Name, n.Addr, string(n.State), n.Epoch, capacity, gpus, templates,
		nullTime(n.RegisteredAt), nullTime(n.HeartbeatAt), formatTime(n.CreatedAt), n.JoinHash)
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
	n, err := scanNode(db.read.QueryRowContext(ctx, "SELECT "+nodeColumns+" FROM nodes WHERE id = ?", id))
	if errors.Is(err, sql.ErrNoRows) {
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
	res, err := db.write.ExecContext(ctx, `UPDATE nodes SET name = ?, addr = ?, state = ?, epoch = ?, capacity = ?,
		gpu_names = ?, templates = ?, registered_at = ?, heartbeat_at = ?, created_at = ?, join_hash = ? WHERE id = ?`,
		n.Name, n.Addr, string(n.State), n.Epoch, capacity, gpus, templates,
		nullTime(n.RegisteredAt), nullTime(n.HeartbeatAt), formatTime(n.CreatedAt), n.JoinHash, n.ID)
	if e := nodeConflict(n, err); e != nil {
		return e
	}
	if err != nil {
		return fmt.Errorf("update node %s: %w", n.ID, err)
	}
	return mustAffect(res, api.Errorf(api.CodeNotFound, "node %s not found", n.ID))
}

// ListNodes lists every node, oldest first.
func (db *DB) ListNodes(ctx context.Context) ([]store.Node, error) {
	ns, err := queryAll(ctx, db.read, scanNode, "SELECT "+nodeColumns+" FROM nodes ORDER BY created_at, id")
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	return ns, nil
}

const placementColumns = "sandbox_id, node_id, epoch, resources, save, save_node_id, save_bytes, saved_at"

func scanPlacement(r scanner) (store.Placement, error) {
	var p store.Placement
	var saved sql.NullString
	var res string
	if err := r.Scan(&p.SandboxID, &p.NodeID, &p.Epoch, &res, &p.Save, &p.SaveNodeID, &p.SaveBytes, &saved); err != nil {
		return store.Placement{}, err
	}
	var d decoder
	d.json(res, &p.Resources)
	p.SavedAt = d.timePtr(saved)
	return p, d.err
}

// PutPlacement creates or replaces a sandbox's placement.
func (db *DB) PutPlacement(ctx context.Context, p store.Placement) error {
	res, err := encodeJSON(p.Resources)
	if err != nil {
		return err
	}
	_, err = db.write.ExecContext(ctx, "INSERT OR REPLACE INTO placements ("+placementColumns+") VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
		p.SandboxID, p.NodeID, p.Epoch, res, p.Save, p.SaveNodeID, p.SaveBytes, nullTime(p.SavedAt))
	if err != nil {
		return fmt.Errorf("put placement of %s: %w", p.SandboxID, err)
	}
	return nil
}

// GetPlacement finds a sandbox's placement.
func (db *DB) GetPlacement(ctx context.Context, sandboxID string) (store.Placement, error) {
	p, err := scanPlacement(db.read.QueryRowContext(ctx, "SELECT "+placementColumns+" FROM placements WHERE sandbox_id = ?", sandboxID))
	if errors.Is(err, sql.ErrNoRows) {
		return store.Placement{}, api.Errorf(api.CodeNotFound, "sandbox %s is placed nowhere", sandboxID)
	}
	if err != nil {
		return store.Placement{}, fmt.Errorf("get placement of %s: %w", sandboxID, err)
	}
	return p, nil
}

// DeletePlacement forgets a sandbox's placement.
func (db *DB) DeletePlacement(ctx context.Context, sandboxID string) error {
	if _, err := db.write.ExecContext(ctx, "DELETE FROM placements WHERE sandbox_id = ?", sandboxID); err != nil {
		return fmt.Errorf("delete placement of %s: %w", sandboxID, err)
	}
	return nil
}

// ListPlacements lists the placements on a node, or all of them.
func (db *DB) ListPlacements(ctx context.Context, nodeID string) ([]store.Placement, error) {
	q, args := "SELECT "+placementColumns+" FROM placements", []any{}
	if nodeID != "" {
		q, args = q+" WHERE node_id = ?", append(args, nodeID)
	}
	ps, err := queryAll(ctx, db.read, scanPlacement, q+" ORDER BY sandbox_id", args...)
	if err != nil {
		return nil, fmt.Errorf("list placements: %w", err)
	}
	return ps, nil
}

// FleetValue returns a named value of the join service.
func (db *DB) FleetValue(ctx context.Context, name string) (string, error) {
	var v string
	err := db.read.QueryRowContext(ctx, "SELECT value FROM fleet_values WHERE name = ?", name).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
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
	res, err := db.write.ExecContext(ctx, "INSERT INTO fleet_values (name, value) VALUES (?, ?) ON CONFLICT (name) DO NOTHING", name, value)
	if err != nil {
		return fmt.Errorf("create fleet value %s: %w", name, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return api.Errorf(api.CodeConflict, "fleet value %s exists", name)
	}
	return nil
}

// PutFleetValue creates or replaces a named value.
func (db *DB) PutFleetValue(ctx context.Context, name, value string) error {
	if _, err := db.write.ExecContext(ctx, "INSERT OR REPLACE INTO fleet_values (name, value) VALUES (?, ?)", name, value); err != nil {
		return fmt.Errorf("put fleet value %s: %w", name, err)
	}
	return nil
}
