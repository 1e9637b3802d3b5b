package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/store"
)

const sandboxColumns = `id, team_id, name, template, state, resources, env, workdir, network, labels,
	idle_timeout_s, on_idle, max_lifetime_s, spend_limit_usd, cost_usd,
	created_at, started_at, last_active_at, expires_at, state_reason, secrets, on_budget, budget_alerts, provision, volumes`

// selectSandbox reads a sandbox's columns and its version.
const selectSandbox = "SELECT " + sandboxColumns + ", set_id, version FROM sandboxes"

// insertSandbox stores version 1, whatever the sandbox's own.
const insertSandbox = `INSERT INTO sandboxes (` + sandboxColumns + `, idempotency_ref, set_id, version) VALUES (
	:id, :team_id, :name, :template, :state, :resources, :env, :workdir, :network, :labels,
	:idle_timeout_s, :on_idle, :max_lifetime_s, :spend_limit_usd, :cost_usd,
	:created_at, :started_at, :last_active_at, :expires_at, :state_reason, :secrets, :on_budget, :budget_alerts, :provision, :volumes, :idempotency_ref, :set_id, 1)`

const updateSandbox = `UPDATE sandboxes SET
	name = :name, template = :template, state = :state, resources = :resources, env = :env,
	workdir = :workdir, network = :network, labels = :labels,
	idle_timeout_s = :idle_timeout_s, on_idle = :on_idle, max_lifetime_s = :max_lifetime_s,
	spend_limit_usd = :spend_limit_usd,
	created_at = :created_at, started_at = :started_at, last_active_at = :last_active_at,
	expires_at = :expires_at, state_reason = :state_reason, secrets = :secrets,
	on_budget = :on_budget, budget_alerts = :budget_alerts, provision = :provision,
	version = version + 1
	WHERE id = :id AND team_id = :team_id AND version = :version`

// sandboxArgs are the named column values of s.
func sandboxArgs(s api.Sandbox) ([]any, error) {
	alerts := s.BudgetAlerts
	if alerts == nil {
		alerts = []float64{}
	}
	volumes := s.Volumes
	if volumes == nil {
		volumes = []api.VolumeMount{}
	}
	var jsons [8]string
	for i, v := range []any{s.Resources, emptyIfNil(s.Env), s.Network, emptyIfNil(s.Labels), store.SecretRefs(s), alerts, s.Provision, volumes} {
		var err error
		if jsons[i], err = encodeJSON(v); err != nil {
			return nil, fmt.Errorf("sandbox %s: %w", s.ID, err)
		}
	}
	var spend sql.NullFloat64
	if s.SpendLimitUSD != nil {
		spend = sql.NullFloat64{Float64: *s.SpendLimitUSD, Valid: true}
	}
	return []any{
		sql.Named("id", s.ID),
		sql.Named("team_id", s.TeamID),
		sql.Named("name", s.Name),
		sql.Named("template", s.Template),
		sql.Named("state", string(s.State)),
		sql.Named("resources", jsons[0]),
		sql.Named("env", jsons[1]),
		sql.Named("workdir", s.Workdir),
		sql.Named("network", jsons[2]),
		sql.Named("labels", jsons[3]),
		sql.Named("idle_timeout_s", s.IdleTimeoutS),
		sql.Named("on_idle", s.OnIdle),
		sql.Named("max_lifetime_s", s.MaxLifetimeS),
		sql.Named("spend_limit_usd", spend),
		sql.Named("cost_usd", s.CostUSD),
		sql.Named("created_at", formatTime(s.CreatedAt)),
		sql.Named("started_at", nullTime(s.StartedAt)),
		sql.Named("last_active_at", nullTime(s.LastActiveAt)),
		sql.Named("expires_at", nullTime(s.ExpiresAt)),
		sql.Named("state_reason", store.CleanText(s.StateReason)),
		sql.Named("secrets", jsons[4]),
		sql.Named("on_budget", s.OnBudget),
		sql.Named("budget_alerts", jsons[5]),
		sql.Named("provision", jsons[6]),
		sql.Named("volumes", jsons[7]),
		sql.Named("idempotency_ref", s.IdempotencyRef),
		sql.Named("set_id", s.SetID),
	}, nil
}

func scanSandbox(r scanner) (api.Sandbox, error) {
	var (
		s                               api.Sandbox
		resources, env, network, labels string
		secrets, alerts                 string
		provision, volumes              string
		created                         string
		started, lastActive, expires    sql.NullString
		spend                           sql.NullFloat64
	)
	err := r.Scan(&s.ID, &s.TeamID, &s.Name, &s.Template, &s.State, &resources, &env, &s.Workdir, &network, &labels,
		&s.IdleTimeoutS, &s.OnIdle, &s.MaxLifetimeS, &spend, &s.CostUSD,
		&created, &started, &lastActive, &expires, &s.StateReason, &secrets, &s.OnBudget, &alerts, &provision, &volumes, &s.SetID, &s.Version)
	if err != nil {
		return api.Sandbox{}, err
	}
	var d decoder
	d.json(resources, &s.Resources)
	d.json(env, &s.Env)
	d.json(network, &s.Network)
	d.json(labels, &s.Labels)
	var refs map[string]api.SecretRef
	d.json(secrets, &refs)
	store.SetSecretRefs(&s, refs)
	d.json(alerts, &s.BudgetAlerts)
	d.json(provision, &s.Provision)
	d.json(volumes, &s.Volumes)
	if len(s.Volumes) == 0 {
		s.Volumes = nil
	}
	s.CreatedAt = d.time(created)
	s.StartedAt = d.timePtr(started)
	s.LastActiveAt = d.timePtr(lastActive)
	s.ExpiresAt = d.timePtr(expires)
	if d.err != nil {
		return api.Sandbox{}, fmt.Errorf("sandbox %s: %w", s.ID, d.err)
	}
	if spend.Valid {
		s.SpendLimitUSD = &spend.Float64
	}
	s.Env = emptyIfNil(s.Env)
	s.Labels = emptyIfNil(s.Labels)
	s.Secrets = emptyIfNil(s.Secrets)
	if s.BudgetAlerts == nil {
		s.BudgetAlerts = []float64{}
	}
	if s.Network.Allow == nil {
		s.Network.Allow = []string{}
	}
	return s, nil
}

// sandboxConflict maps a failed write of s to a coded error, or returns nil.
func sandboxConflict(err error, s api.Sandbox) error {
	switch sqliteCode(err) {
	case uniqueViolation: // the only unique index besides the key: live names
		return api.Errorf(api.CodeConflict, "a sandbox named %s already exists", s.Name)
	case primaryKeyViolation:
		return api.Errorf(api.CodeConflict, "sandbox %s already exists", s.ID)
	case foreignKeyViolation:
		return api.Errorf(api.CodeNotFound, "team %s not found", s.TeamID)
	}
	return nil
}

// CreateSandbox stores a new sandbox of an existing team.
func (db *DB) CreateSandbox(ctx context.Context, s api.Sandbox) error {
	args, err := sandboxArgs(s)
	if err != nil {
		return err
	}
	if _, err = db.write.ExecContext(ctx, insertSandbox, args...); err != nil {
		return sandboxError(s, "insert")(err)
	}
	return nil
}

// CreateSandboxEvent is CreateSandbox and AppendEvent of e to the
// sandbox's team in one transaction: both are stored, or neither.
func (db *DB) CreateSandboxEvent(ctx context.Context, s api.Sandbox, e api.Event) (api.Event, error) {
	args, err := sandboxArgs(s)
	if err != nil {
		return e, err
	}
	_, stored, err := db.execWithEvent(ctx, s.TeamID, e, sandboxError(s, "insert"), insertSandbox, args...)
	return stored, err
}

// UpdateSandboxEvent is UpdateSandbox and AppendEvent of e to the
// sandbox's team in one transaction: both are stored, or neither.
func (db *DB) UpdateSandboxEvent(ctx context.Context, s api.Sandbox, e api.Event) (api.Event, error) {
	args, err := sandboxArgs(s)
	if err != nil {
		return e, err
	}
	res, stored, err := db.execWithEvent(ctx, s.TeamID, e, sandboxError(s, "update"),
		updateSandbox, append(args, sql.Named("version", s.Version))...)
	if err != nil {
		return e, err
	}
	if err := db.versioned(ctx, res, "sandbox "+s.ID,
		"SELECT 1 FROM sandboxes WHERE id = ? AND team_id = ?", s.ID, s.TeamID); err != nil {
		return e, err
	}
	return stored, nil
}

// sandboxError is the error of a failed write (verb) of s: a conflict of
// its name or ID, a missing team, or the store's own.
func sandboxError(s api.Sandbox, verb string) func(error) error {
	return func(err error) error {
		if cerr := sandboxConflict(err, s); cerr != nil {
			return cerr
		}
		return fmt.Errorf("%s sandbox %s: %w", verb, s.ID, err)
	}
}

// UpdateSandbox replaces every field of the sandbox with s's ID and team
// but cost_usd, which AccrueUsage keeps, when the row is still at
// s.Version, and stores the next version.
func (db *DB) UpdateSandbox(ctx context.Context, s api.Sandbox) error {
	args, err := sandboxArgs(s)
	if err != nil {
		return err
	}
	res, err := db.write.ExecContext(ctx, updateSandbox, append(args, sql.Named("version", s.Version))...)
	if err != nil {
		return sandboxError(s, "update")(err)
	}
	return db.versioned(ctx, res, "sandbox "+s.ID,
		"SELECT 1 FROM sandboxes WHERE id = ? AND team_id = ?", s.ID, s.TeamID)
}

// GetSandbox returns the sandbox of that team with that ID.
func (db *DB) GetSandbox(ctx context.Context, teamID, id string) (api.Sandbox, error) {
	row := db.read.QueryRowContext(ctx,
		selectSandbox+" WHERE id = ? AND (? = '' OR team_id = ?)", id, teamID, teamID)
	return getSandbox(row, id)
}

// GetSandboxByName returns the newest live sandbox of that name, or else the
// newest terminal one.
func (db *DB) GetSandboxByName(ctx context.Context, teamID, name string) (api.Sandbox, error) {
	if name == "" {
		return api.Sandbox{}, api.Errorf(api.CodeNotFound, "sandbox with an empty name not found")
	}
	row := db.read.QueryRowContext(ctx, selectSandbox+`
		WHERE team_id = ? AND name = ?
		ORDER BY state IN ('terminated', 'failed'), created_at DESC, id DESC
		LIMIT 1`, teamID, name)
	return getSandbox(row, name)
}

func getSandbox(row *sql.Row, ref string) (api.Sandbox, error) {
	s, err := scanSandbox(row)
	if errors.Is(err, sql.ErrNoRows) {
		return api.Sandbox{}, api.Errorf(api.CodeNotFound, "sandbox %s not found", ref)
	}
	if err != nil {
		return api.Sandbox{}, fmt.Errorf("get sandbox %s: %w", ref, err)
	}
	return s, nil
}

// ListSandboxes returns the sandboxes f selects, by ID.
func (db *DB) ListSandboxes(ctx context.Context, f store.SandboxFilter) ([]api.Sandbox, error) {
	var w where
	if f.TeamID != "" {
		w.add("team_id = ?", f.TeamID)
	}
	in(&w, "state", f.States)
	if f.IdempotencyRef != "" {
		w.add("idempotency_ref = ?", f.IdempotencyRef)
	}
	for _, k := range slices.Sorted(maps.Keys(f.Labels)) {
		w.add("EXISTS (SELECT 1 FROM json_each(sandboxes.labels) AS l WHERE l.key = ? AND l.value = ?)", k, f.Labels[k])
	}
	q, args := w.query(selectSandbox, f.After, f.Limit)
	ss, err := queryAll(ctx, db.read, scanSandbox, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	return ss, nil
}
