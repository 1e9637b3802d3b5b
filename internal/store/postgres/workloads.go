package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

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
	_, err = db.pool.Exec(ctx, "INSERT INTO workloads (id, team_id, state, created_at, data) VALUES ($1, $2, $3, $4, $5)",
		w.ID, w.TeamID, string(w.State), w.CreatedAt, data)
	switch violation(err) {
	case "primary":
		return api.Errorf(api.CodeConflict, "workload %s already exists", w.ID)
	case "foreign":
		return api.Errorf(api.CodeNotFound, "team %s not found", w.TeamID)
	}
	if err != nil {
		return fmt.Errorf("insert workload %s: %w", w.ID, err)
	}
	return nil
}

// GetWorkload finds a workload of the team (any team's for "").
func (db *DB) GetWorkload(ctx context.Context, teamID, id string) (api.Workload, error) {
	var w where
	w.add("id = ?", id)
	if teamID != "" {
		w.add("team_id = ?", teamID)
	}
	wl, err := scanWorkload(db.pool.QueryRow(ctx, "SELECT data, version FROM workloads"+w.clause(), w.args...))
	if errors.Is(err, pgx.ErrNoRows) {
		return api.Workload{}, api.Errorf(api.CodeNotFound, "workload %s not found", id)
	}
	if err != nil {
		return api.Workload{}, fmt.Errorf("get workload %s: %w", id, err)
	}
	return wl, nil
}

// ListWorkloads lists workloads, oldest first.
func (db *DB) ListWorkloads(ctx context.Context, f store.WorkloadFilter) ([]api.Workload, error) {
	var w where
	if f.TeamID != "" {
		w.add("team_id = ?", f.TeamID)
	}
	in(&w, "state", f.States)
	q, args := w.query("SELECT data, version FROM workloads", f.After, f.Limit)
	ws, err := queryAll(ctx, db.pool, scanWorkload, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list workloads: %w", err)
	}
	return ws, nil
}
