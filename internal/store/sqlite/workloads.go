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

// workloadData is the JSON kept in a workload's row: the workload with
// its times in UTC and its maps and slices non-nil.
func workloadData(w api.Workload) (string, error) {
	w.CreatedAt = w.CreatedAt.UTC()
	for _, t := range []**time.Time{&w.StartedAt, &w.EndedAt} {
		if *t != nil {
			u := (*t).UTC()
			*t = &u
		}
	}
	return encodeJSON(normalWorkload(w))
}

func normalWorkload(w api.Workload) api.Workload {
	w.Env, w.Secrets, w.Labels = emptyIfNil(w.Env), emptyIfNil(w.Secrets), emptyIfNil(w.Labels)
	if w.Argv == nil {
		w.Argv = []string{}
	}
	if w.Devices == nil {
		w.Devices = []string{}
	}
	return w
}

func scanWorkload(r scanner) (api.Workload, error) {
	var data string
	var version int64
	if err := r.Scan(&data, &version); err != nil {
		return api.Workload{}, err
	}
	var w api.Workload
	var d decoder
	d.json(data, &w)
	w.Version = version
	return normalWorkload(w), d.err
}

// CreateWorkload stores a new workload.
func (db *DB) CreateWorkload(ctx context.Context, w api.Workload) error {
	data, err := workloadData(w)
	if err != nil {
		return err
	}
	_, err = db.write.ExecContext(ctx, "INSERT INTO workloads (id, team_id, state, created_at, data, version) VALUES (?, ?, ?, ?, ?, 1)",
		w.ID, w.TeamID, string(w.State), formatTime(w.CreatedAt), data)
	switch sqliteCode(err) {
	case primaryKeyViolation:
		return api.Errorf(api.CodeConflict, "workload %s already exists", w.ID)
	case foreignKeyViolation:
		return api.Errorf(api.CodeNotFound, "team %s not found", w.TeamID)
	}
	if err != nil {
		return fmt.Errorf("insert workload %s: %w", w.ID, err)
	}
	return nil
}

// GetWorkload finds a workload of the team (any team's for "").
func (db *DB) GetWorkload(ctx context.Context, teamID, id string) (api.Workload, error) {
	q, args := "SELECT data, version FROM workloads WHERE id = ?", []any{id}
	if teamID != "" {
		q, args = q+" AND team_id = ?", append(args, teamID)
	}
	w, err := scanWorkload(db.read.QueryRowContext(ctx, q, args...))
	if errors.Is(err, sql.ErrNoRows) {
		return api.Workload{}, api.Errorf(api.CodeNotFound, "workload %s not found", id)
	}
	if err != nil {
		return api.Workload{}, fmt.Errorf("get workload %s: %w", id, err)
	}
	return w, nil
}

// UpdateWorkload replaces a workload's fields when the row is still at
// w.Version, and stores the next version.
func (db *DB) UpdateWorkload(ctx context.Context, w api.Workload) error {
	data, err := workloadData(w)
	if err != nil {
		return err
	}
	res, err := db.write.ExecContext(ctx, `UPDATE workloads SET state = ?, data = ?, version = version + 1
		WHERE id = ? AND team_id = ? AND version = ?`,
		string(w.State), data, w.ID, w.TeamID, w.Version)
	if err != nil {
		return fmt.Errorf("update workload %s: %w", w.ID, err)
	}
	return db.versioned(ctx, res, "workload "+w.ID,
		"SELECT 1 FROM workloads WHERE id = ? AND team_id = ?", w.ID, w.TeamID)
}

// ListWorkloads lists workloads, oldest first.
func (db *DB) ListWorkloads(ctx context.Context, f store.WorkloadFilter) ([]api.Workload, error) {
	var w where
	if f.TeamID != "" {
		w.add("team_id = ?", f.TeamID)
	}
	in(&w, "state", f.States)
	q, args := w.query("SELECT data, version FROM workloads", f.After, f.Limit)
	ws, err := queryAll(ctx, db.read, scanWorkload, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list workloads: %w", err)
	}
	return ws, nil
}
