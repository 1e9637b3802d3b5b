package postgres

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/store"
)

const sandboxColumns = `id, team_id, name, template, state, resources, env, workdir, network, labels,
	idle_timeout_s, on_idle, max_lifetime_s, spend_limit_usd, cost_usd,
	created_at, started_at, last_active_at, expires_at, state_reason, secrets, on_budget, budget_alerts, provision, volumes`

const insertSandbox = `INSERT INTO sandboxes (` + sandboxColumns + `, idempotency_ref, set_id) VALUES (
	@id, @team_id, @name, @template, @state, @resources, @env, @workdir, @network, @labels,
	@idle_timeout_s, @on_idle, @max_lifetime_s, @spend_limit_usd, @cost_usd,
	@created_at, @started_at, @last_active_at, @expires_at, @state_reason, @secrets, @on_budget, @budget_alerts, @provision, @volumes, @idempotency_ref, @set_id)`

// selectSandbox reads a sandbox's columns and its version (versions.go).
const selectSandbox = "SELECT " + sandboxColumns + ", set_id, version FROM sandboxes"

// sandboxArgs are the named column values of s.
func sandboxArgs(s api.Sandbox) (pgx.NamedArgs, error) {
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
	return pgx.NamedArgs{
		"id":              s.ID,
		"team_id":         s.TeamID,
		"name":            s.Name,
		"template":        s.Template,
		"state":           string(s.State),
		"resources":       jsons[0],
		"env":             jsons[1],
		"workdir":         s.Workdir,
		"network":         jsons[2],
		"labels":          jsons[3],
		"idle_timeout_s":  s.IdleTimeoutS,
		"on_idle":         s.OnIdle,
		"max_lifetime_s":  s.MaxLifetimeS,
		"spend_limit_usd": s.SpendLimitUSD,
		"cost_usd":        s.CostUSD,
		"created_at":      s.CreatedAt,
		"started_at":      s.StartedAt,
		"last_active_at":  s.LastActiveAt,
		"expires_at":      s.ExpiresAt,
		"state_reason":    store.CleanText(s.StateReason),
		"secrets":         jsons[4],
		"on_budget":       s.OnBudget,
		"budget_alerts":   jsons[5],
		"provision":       jsons[6],
		"volumes":         jsons[7],
		"idempotency_ref": s.IdempotencyRef,
		"set_id":          s.SetID,
	}, nil
}

func scanSandbox(r scanner) (api.Sandbox, error) {
	var (
		s                               api.Sandbox
		resources, env, network, labels string
		secrets, alerts                 string
		provision, volumes              string
	)
	err := r.Scan(&s.ID, &s.TeamID, &s.Name, &s.Template, &s.State, &resources, &env, &s.Workdir, &network, &labels,
		&s.IdleTimeoutS, &s.OnIdle, &s.MaxLifetimeS, &s.SpendLimitUSD, &s.CostUSD,
		&s.CreatedAt, &s.StartedAt, &s.LastActiveAt, &s.ExpiresAt, &s.StateReason, &secrets, &s.OnBudget, &alerts, &provision, &volumes, &s.SetID, &s.Version)
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
	if d.err != nil {
		return api.Sandbox{}, fmt.Errorf("sandbox %s: %w", s.ID, d.err)
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
	switch violation(err) {
	case "unique": // the only unique index besides the key: live names
		return api.Errorf(api.CodeConflict, "a sandbox named %s already exists", s.Name)
	case "primary":
		return api.Errorf(api.CodeConflict, "sandbox %s already exists", s.ID)
	case "foreign":
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
	if _, err = db.pool.Exec(ctx, insertSandbox, args); err != nil {
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
	_, stored, err := db.execWithEvent(ctx, s.TeamID, e, sandboxError(s, "insert"), insertSandbox, args)
	if err != nil {
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

// GetSandbox returns the sandbox of that team with that ID.
func (db *DB) GetSandbox(ctx context.Context, teamID, id string) (api.Sandbox, error) {
	row := db.pool.QueryRow(ctx,
		selectSandbox+" WHERE id = $1 AND ($2 = '' OR team_id = $2)", id, teamID)
	return getSandbox(row, id)
}

// GetSandboxByName returns the newest live sandbox of that name, or else the
// newest terminal one.
func (db *DB) GetSandboxByName(ctx context.Context, teamID, name string) (api.Sandbox, error) {
	if name == "" {
		return api.Sandbox{}, api.Errorf(api.CodeNotFound, "sandbox with an empty name not found")
	}
	row := db.pool.QueryRow(ctx, selectSandbox+`
		WHERE team_id = $1 AND name = $2
		ORDER BY state IN ('terminated', 'failed'), created_at DESC, id DESC
		LIMIT 1`, teamID, name)
	return getSandbox(row, name)
}

func getSandbox(row pgx.Row, ref string) (api.Sandbox, error) {
	s, err := scanSandbox(row)
	if errors.Is(err, pgx.ErrNoRows) {
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
		w.add("labels ->> ?::text = ?::text", k, f.Labels[k])
	}
	q, args := w.query(selectSandbox, f.After, f.Limit)
	ss, err := queryAll(ctx, db.pool, scanSandbox, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	return ss, nil
}
