package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/store"
)

const teamColumns = "id, name, admission, created_at, spend_limit_usd, budget_alerts"

func scanTeam(r scanner) (api.Team, error) {
	var t api.Team
	var admission, created, alerts string
	var spend sql.NullFloat64
	if err := r.Scan(&t.ID, &t.Name, &admission, &created, &spend, &alerts); err != nil {
		return api.Team{}, err
	}
	var d decoder
	d.json(admission, &t.Admission)
	d.json(alerts, &t.BudgetAlerts)
	t.CreatedAt = d.time(created)
	if spend.Valid {
		t.SpendLimitUSD = &spend.Float64
	}
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
	var spend sql.NullFloat64
	if t.SpendLimitUSD != nil {
		spend = sql.NullFloat64{Float64: *t.SpendLimitUSD, Valid: true}
	}
	return []any{t.ID, t.Name, admission, formatTime(t.CreatedAt), spend, alerts}, nil
}

// CreateTeam stores a new team.
func (db *DB) CreateTeam(ctx context.Context, t api.Team) error {
	args, err := teamArgs(t)
	if err != nil {
		return err
	}
	_, err = db.write.ExecContext(ctx, "INSERT INTO teams ("+teamColumns+") VALUES (?, ?, ?, ?, ?, ?)", args...)
	switch sqliteCode(err) {
	case uniqueViolation:
		return api.Errorf(api.CodeConflict, "a team named %s already exists", t.Name)
	case primaryKeyViolation:
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
	row := db.read.QueryRowContext(ctx, "SELECT "+teamColumns+" FROM teams WHERE "+column+" = ?", value)
	t, err := scanTeam(row)
	if errors.Is(err, sql.ErrNoRows) {
		return api.Team{}, api.Errorf(api.CodeNotFound, "team %s not found", value)
	}
	if err != nil {
		return api.Team{}, fmt.Errorf("get team %s: %w", value, err)
	}
	return t, nil
}

// ListTeams returns every team, oldest first.
func (db *DB) ListTeams(ctx context.Context) ([]api.Team, error) {
	ts, err := queryAll(ctx, db.read, scanTeam, "SELECT "+teamColumns+" FROM teams ORDER BY created_at, id")
	if err != nil {
		return nil, fmt.Errorf("list teams: %w", err)
	}
	return ts, nil
}

// CreateKey stores a new API key of an existing team.
func (db *DB) CreateKey(ctx context.Context, k store.Key) error {
	_, err := db.write.ExecContext(ctx,
		"INSERT INTO api_keys (id, team_id, hash, created_at, revoked_at) VALUES (?, ?, ?, ?, ?)",
		k.ID, k.TeamID, k.Hash, formatTime(k.CreatedAt), nullTime(k.RevokedAt))
	switch sqliteCode(err) {
	case uniqueViolation:
		return api.Errorf(api.CodeConflict, "a key with that hash already exists")
	case primaryKeyViolation:
		return api.Errorf(api.CodeConflict, "key %s already exists", k.ID)
	case foreignKeyViolation:
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
	var created string
	row := db.read.QueryRowContext(ctx, "SELECT "+keyTeamColumns+
		" FROM api_keys k JOIN teams t ON t.id = k.team_id WHERE k.hash = ? AND k.revoked_at IS NULL", hash)
	t, err := scanTeam(withColumns{row, []any{&k.ID, &created}})
	if errors.Is(err, sql.ErrNoRows) {
		return store.Key{}, api.Team{}, api.Errorf(api.CodeNotFound, "key not found")
	}
	if err != nil {
		return store.Key{}, api.Team{}, fmt.Errorf("get key: %w", err)
	}
	var d decoder
	k.TeamID, k.CreatedAt = t.ID, d.time(created)
	return k, t, d.err
}

// keyTeamColumns are a team's columns (teamColumns, of t) then its key's
// (k) ID and creation time.
var keyTeamColumns = "t." + strings.ReplaceAll(teamColumns, ", ", ", t.") + ", k.id, k.created_at"

// GetKey returns a key by ID, revoked or not.
func (db *DB) GetKey(ctx context.Context, id string) (store.Key, error) {
	return db.getKey(ctx, "id = ?", id)
}

func (db *DB) getKey(ctx context.Context, where, arg string) (store.Key, error) {
	var k store.Key
	var created string
	var revoked sql.NullString
	err := db.read.QueryRowContext(ctx,
		"SELECT id, team_id, hash, created_at, revoked_at FROM api_keys WHERE "+where, arg).
		Scan(&k.ID, &k.TeamID, &k.Hash, &created, &revoked)
	if errors.Is(err, sql.ErrNoRows) {
		return store.Key{}, api.Errorf(api.CodeNotFound, "key not found")
	}
	if err != nil {
		return store.Key{}, fmt.Errorf("get key: %w", err)
	}
	var d decoder
	k.CreatedAt = d.time(created)
	k.RevokedAt = d.timePtr(revoked)
	return k, d.err
}

// RevokeKey revokes a key; revoking a revoked key keeps its first revocation.
func (db *DB) RevokeKey(ctx context.Context, id string) error {
	res, err := db.write.ExecContext(ctx,
		"UPDATE api_keys SET revoked_at = COALESCE(revoked_at, ?) WHERE id = ?", formatTime(db.now()), id)
	if err != nil {
		return fmt.Errorf("revoke key %s: %w", id, err)
	}
	return mustAffect(res, api.Errorf(api.CodeNotFound, "key %s not found", id))
}
