package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cove-dev/cove/api"
)

// The updates of versioned rows (store.Store): each succeeds only on the
// row's version as read and stores the next one, in one statement, so
// that replicas writing one row at once cannot both succeed.

const updateSandbox = `UPDATE sandboxes SET
	name = @name, template = @template, state = @state, resources = @resources, env = @env,
	workdir = @workdir, network = @network, labels = @labels,
	idle_timeout_s = @idle_timeout_s, on_idle = @on_idle, max_lifetime_s = @max_lifetime_s,
	spend_limit_usd = @spend_limit_usd,
	created_at = @created_at, started_at = @started_at, last_active_at = @last_active_at,
	expires_at = @expires_at, state_reason = @state_reason, secrets = @secrets,
	on_budget = @on_budget, budget_alerts = @budget_alerts, provision = @provision,
	version = version + 1
	WHERE id = @id AND team_id = @team_id AND version = @version`

const updateCommand = `UPDATE commands SET
	command = @command, argv = @argv, cwd = @cwd, env = @env, "user" = @user,
	timeout_s = @timeout_s, stdin = @stdin, pty = @pty, no_output_alert_s = @no_output_alert_s,
	state = @state, exit_code = @exit_code, signal = @signal, timed_out = @timed_out,
	started_at = @started_at, ended_at = @ended_at,
	stdout_bytes = @stdout_bytes, stderr_bytes = @stderr_bytes, secrets = @secrets, pid = @pid, tag = @tag,
	version = version + 1
	WHERE id = @id AND sandbox_id = @sandbox_id AND version = @version`

// UpdateSandbox replaces every field of the sandbox with s's ID and team
// but cost_usd, which AccrueUsage keeps, when the row is still at
// s.Version, and stores the next version.
func (db *DB) UpdateSandbox(ctx context.Context, s api.Sandbox) error {
	args, err := sandboxArgs(s)
	if err != nil {
		return err
	}
	args["version"] = s.Version
	tag, err := db.pool.Exec(ctx, updateSandbox, args)
	if err != nil {
		return sandboxError(s, "update")(err)
	}
	return db.versioned(ctx, tag, "sandbox "+s.ID,
		"SELECT 1 FROM sandboxes WHERE id = $1 AND team_id = $2", s.ID, s.TeamID)
}

// UpdateSandboxEvent is UpdateSandbox and AppendEvent of e to the
// sandbox's team in one transaction: both are stored, or neither.
func (db *DB) UpdateSandboxEvent(ctx context.Context, s api.Sandbox, e api.Event) (api.Event, error) {
	args, err := sandboxArgs(s)
	if err != nil {
		return e, err
	}
	args["version"] = s.Version
	tag, stored, err := db.execWithEvent(ctx, s.TeamID, e, sandboxError(s, "update"), updateSandbox, args)
	if err != nil {
		return e, err
	}
	if err := db.versioned(ctx, tag, "sandbox "+s.ID,
		"SELECT 1 FROM sandboxes WHERE id = $1 AND team_id = $2", s.ID, s.TeamID); err != nil {
		return e, err
	}
	return stored, nil
}

// UpdateCommand replaces every field of the command with c's ID and
// sandbox when the row is still at c.Version, and stores the next version.
func (db *DB) UpdateCommand(ctx context.Context, c api.Command) error {
	args, err := commandArgs(c)
	if err != nil {
		return err
	}
	args["version"] = c.Version
	tag, err := db.pool.Exec(ctx, updateCommand, args)
	if err != nil {
		return fmt.Errorf("update command %s: %w", c.ID, err)
	}
	return db.versioned(ctx, tag, "command "+c.ID,
		"SELECT 1 FROM commands WHERE id = $1 AND sandbox_id = $2", c.ID, c.SandboxID)
}

// UpdateCommandEvent is UpdateCommand and AppendEvent of e in one
// transaction: both are stored, or neither.
func (db *DB) UpdateCommandEvent(ctx context.Context, c api.Command, teamID string, e api.Event) (api.Event, error) {
	args, err := commandArgs(c)
	if err != nil {
		return e, err
	}
	args["version"] = c.Version
	tag, stored, err := db.execWithEvent(ctx, teamID, e, func(err error) error {
		return fmt.Errorf("update command %s: %w", c.ID, err)
	}, updateCommand, args)
	if err != nil {
		return e, err
	}
	if err := db.versioned(ctx, tag, "command "+c.ID,
		"SELECT 1 FROM commands WHERE id = $1 AND sandbox_id = $2", c.ID, c.SandboxID); err != nil {
		return e, err
	}
	return stored, nil
}

// execWithEvent runs query, a write of one row, in a transaction and,
// when it wrote the row, appends e to teamID's log (with its webhook
// deliveries) in the same transaction: both are stored, or neither. It
// returns the statement's tag and the event as stored; a statement that
// wrote nothing (a stale or missing row) appends nothing, for the caller
// to ask which (versioned). failed makes the statement's error the
// caller's.
func (db *DB) execWithEvent(ctx context.Context, teamID string, e api.Event, failed func(error) error, query string, args pgx.NamedArgs) (pgconn.CommandTag, api.Event, error) {
	data, err := eventData(&e)
	if err != nil {
		return pgconn.CommandTag{}, e, err
	}
	var (
		tag    pgconn.CommandTag
		stored api.Event
	)
	err = db.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		if tag, err = tx.Exec(ctx, query, args); err != nil {
			return failed(err)
		}
		if tag.RowsAffected() == 0 {
			return nil
		}
		stored, err = db.appendEvent(ctx, tx, teamID, e, data)
		return err
	})
	return tag, stored, err
}

// UpdateWorkload replaces a workload's fields when the row is still at
// w.Version, and stores the next version.
func (db *DB) UpdateWorkload(ctx context.Context, w api.Workload) error {
	data, err := workloadData(w)
	if err != nil {
		return err
	}
	tag, err := db.pool.Exec(ctx, `UPDATE workloads SET state = $1, data = $2, version = version + 1
		WHERE id = $3 AND team_id = $4 AND version = $5`,
		string(w.State), data, w.ID, w.TeamID, w.Version)
	if err != nil {
		return fmt.Errorf("update workload %s: %w", w.ID, err)
	}
	return db.versioned(ctx, tag, "workload "+w.ID,
		"SELECT 1 FROM workloads WHERE id = $1 AND team_id = $2", w.ID, w.TeamID)
}

// versioned checks the result of a compare-and-swap update of what (say
// "sandbox sbx_…"): no row changed means that the row exists at another
// version (CodeConflict: it changed since it was read) or that there is
// none, which exists, a query for it, tells apart.
func (db *DB) versioned(ctx context.Context, tag pgconn.CommandTag, what, exists string, args ...any) error {
	if tag.RowsAffected() > 0 {
		return nil
	}
	var one int
	err := db.pool.QueryRow(ctx, exists, args...).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return api.Errorf(api.CodeNotFound, "%s not found", what)
	}
	if err != nil {
		return fmt.Errorf("look up %s: %w", what, err)
	}
	return api.Errorf(api.CodeConflict, "%s changed since it was read; retry", what)
}
