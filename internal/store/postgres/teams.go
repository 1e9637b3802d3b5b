package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/store"
)

const teamColumns = "id, name, admission, created_at, spend_limit_usd, budget_alerts"

func scanTeam(r scanner) (api.Team, error) {
	var t api.Team
	var admission, alerts string
	if err := r.Scan(&t.ID, &t.Name, &admission, &t.CreatedAt, &t.SpendLimitUSD, &alerts); err != nil {
		return api.Team{}, err
	}
	var d decoder
	d.json(admission, &t.Admission)
	d.json(alerts, &t.BudgetAlerts)
	if t.BudgetAlerts == nil {
		t.BudgetAlerts = []float64{}
	}
	return t, d.err
}

// teamArgs are the column values of t, in teamColumns' order.
func teamArgs(t api.Team) ([]any, error) {
	admission, err := encodeJSON(t.Admission)
	if err != nil {
		return nil, err
	}
	if t.BudgetAlerts == nil {
		t.BudgetAlerts = []float64{}
	}
	alerts, err := encodeJSON(t.BudgetAlerts)
	if err != nil {
		return nil, err
	}
	return []any{t.ID, t.Name, admission, t.CreatedAt, t.SpendLimitUSD, alerts}, nil
}

// CreateTeam stores a new team.
func (db *DB) CreateTeam(ctx context.Context, t api.Team) error {
	args, err := teamArgs(t)
	if err != nil {
		return err
	}
	_, err = db.pool.Exec(ctx, "INSERT INTO teams ("+teamColumns+") VALUES ($1, $2, $3, $4, $5, $6)", args...)
	switch violation(err) {
	case "unique":
		return api.Errorf(api.CodeConflict, "a team named %s already exists", t.Name)
	case "primary":
		return api.Errorf(api.CodeConflict, "team %s already exists", t.ID)
	}
	if err != nil {
		return fmt.Errorf("insert team %s: %w", t.ID, err)
	}
	return nil
}

// GetTeam returns the team with that ID.
func (db *DB) GetTeam(ctx context.Context, id string) (api.Team, error) {
	return db.getTeam(ctx, "id", id)
}

// GetTeamByName returns the team with that name.
func (db *DB) GetTeamByName(ctx context.Context, name string) (api.Team, error) {
	return db.getTeam(ctx, "name", name)
}

func (db *DB) getTeam(ctx context.Context, column, value string) (api.Team, error) {
	row := db.pool.QueryRow(ctx, "SELECT "+teamColumns+" FROM teams WHERE "+column+" = $1", value)
	t, err := scanTeam(row)
	if errors.Is(err, pgx.ErrNoRows) {
		return api.Team{}, api.Errorf(api.CodeNotFound, "team %s not found", value)
	}
	if err != nil {
		return api.Team{}, fmt.Errorf("get team %s: %w", value, err)
	}
	return t, nil
}

// ListTeams returns every team, oldest first.
func (db *DB) ListTeams(ctx context.Context) ([]api.Team, error) {
	ts, err := queryAll(ctx, db.pool, scanTeam, "SELECT "+teamColumns+" FROM teams ORDER BY created_at, id")
	if err != nil {
		return nil, fmt.Errorf("list teams: %w", err)
	}
	return ts, nil
}

// CreateKey stores a new API key of an existing team.
func (db *DB) CreateKey(ctx context.Context, k store.Key) error {
	_, err := db.pool.Exec(ctx,
		"INSERT INTO api_keys (id, team_id, hash, created_at, revoked_at) VALUES ($1, $2, $3, $4, $5)",
		k.ID, k.TeamID, k.Hash, k.CreatedAt, k.RevokedAt)
	switch violation(err) {
	case "unique":
		return api.Errorf(api.CodeConflict, "a key with that hash already exists")
	case "primary":
		return api.Errorf(api.CodeConflict, "key %s already exists", k.ID)
	case "foreign":
		return api.Errorf(api.CodeNotFound, "team %s not found", k.TeamID)
	}
	if err != nil {
		return fmt.Errorf("insert key %s: %w", k.ID, err)
	}
	return nil
}

// KeyByHash returns the unrevoked key with that hash and its team.
func (db *DB) KeyByHash(ctx context.Context, hash string) (store.Key, api.Team, error) {
	k := store.Key{Hash: hash}
	row := db.pool.QueryRow(ctx, "SELECT "+keyTeamColumns+
		" FROM api_keys k JOIN teams t ON t.id = k.team_id WHERE k.hash = $1 AND k.revoked_at IS NULL", hash)
	t, err := scanTeam(withColumns{row, []any{&k.ID, &k.CreatedAt}})
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Key{}, api.Team{}, api.Errorf(api.CodeNotFound, "key not found")
	}
	if err != nil {
		return store.Key{}, api.Team{}, fmt.Errorf("get key: %w", err)
	}
	k.TeamID = t.ID
	return k, t, nil
}

// keyTeamColumns are a team's columns (teamColumns, of t) then its key's
// (k) ID and creation time.
var keyTeamColumns = "t." + strings.ReplaceAll(teamColumns, ", ", ", t.") + ", k.id, k.created_at"

// GetKey returns a key by ID, revoked or not.
func (db *DB) GetKey(ctx context.Context, id string) (store.Key, error) {
	return db.getKey(ctx, "id = $1", id)
}

func (db *DB) getKey(ctx context.Context, where, arg string) (store.Key, error) {
	var k store.Key
	err := db.pool.QueryRow(ctx,
		"SELECT id, team_id, hash, created_at, revoked_at FROM api_keys WHERE "+where, arg).
		Scan(&k.ID, &k.TeamID, &k.Hash, &k.CreatedAt, &k.RevokedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Key{}, api.Errorf(api.CodeNotFound, "key not found")
	}
	if err != nil {
		return store.Key{}, fmt.Errorf("get key: %w", err)
	}
	return k, nil
}

// RevokeKey revokes a key; revoking a revoked key keeps its first revocation.
func (db *DB) RevokeKey(ctx context.Context, id string) error {
	tag, err := db.pool.Exec(ctx,
		"UPDATE api_keys SET revoked_at = COALESCE(revoked_at, $1) WHERE id = $2", db.now(), id)
	if err != nil {
		return fmt.Errorf("revoke key %s: %w", id, err)
	}
	return mustAffect(tag, api.Errorf(api.CodeNotFound, "key %s not found", id))
}

// UpdateTeam replaces a team's admission and budget.
func (db *DB) UpdateTeam(ctx context.Context, t api.Team) error {
	args, err := teamArgs(t)
	if err != nil {
		return err
	}
	tag, err := db.pool.Exec(ctx, `UPDATE teams SET name = $2, admission = $3, created_at = $4,
		spend_limit_usd = $5, budget_alerts = $6 WHERE id = $1`, args...)
	if violation(err) == "unique" {
		return api.Errorf(api.CodeConflict, "a team named %s already exists", t.Name)
	}
	if err != nil {
		return fmt.Errorf("update team %s: %w", t.ID, err)
	}
	return mustAffect(tag, api.Errorf(api.CodeNotFound, "team %s not found", t.ID))
}

// SetTeamAdmission replaces a team's admission flags.
func (db *DB) SetTeamAdmission(ctx context.Context, teamID string, a api.Admission) error {
	admission, err := encodeJSON(a)
	if err != nil {
		return err
	}
	tag, err := db.pool.Exec(ctx, "UPDATE teams SET admission = $1 WHERE id = $2", admission, teamID)
	if err != nil {
		return fmt.Errorf("set admission of %s: %w", teamID, err)
	}
	return mustAffect(tag, api.Errorf(api.CodeNotFound, "team %s not found", teamID))
}
