package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/store"
)

const commandColumns = `id, sandbox_id, command, argv, cwd, env, user, timeout_s, stdin, pty,
	no_output_alert_s, state, exit_code, signal, timed_out, started_at, ended_at,
	stdout_bytes, stderr_bytes, secrets, pid, tag`

// selectCommand reads a command's columns and its version.
const selectCommand = "SELECT " + commandColumns + ", version FROM commands"

// insertCommand stores version 1, whatever the command's own.
const insertCommand = `INSERT INTO commands (` + commandColumns + `, version) VALUES (
	:id, :sandbox_id, :command, :argv, :cwd, :env, :user, :timeout_s, :stdin, :pty,
	:no_output_alert_s, :state, :exit_code, :signal, :timed_out, :started_at, :ended_at,
	:stdout_bytes, :stderr_bytes, :secrets, :pid, :tag, 1)`

const updateCommand = `UPDATE commands SET
	command = :command, argv = :argv, cwd = :cwd, env = :env, user = :user,
	timeout_s = :timeout_s, stdin = :stdin, pty = :pty, no_output_alert_s = :no_output_alert_s,
	state = :state, exit_code = :exit_code, signal = :signal, timed_out = :timed_out,
	started_at = :started_at, ended_at = :ended_at,
	stdout_bytes = :stdout_bytes, stderr_bytes = :stderr_bytes, secrets = :secrets, pid = :pid, tag = :tag,
	version = version + 1
	WHERE id = :id AND sandbox_id = :sandbox_id AND version = :version`

// commandArgs are the named column values of c.
func commandArgs(c api.Command) ([]any, error) {
	argv := c.Argv
	if argv == nil {
		argv = []string{}
	}
	argvJSON, err := encodeJSON(argv)
	if err != nil {
		return nil, fmt.Errorf("command %s: %w", c.ID, err)
	}
	env, err := encodeJSON(emptyIfNil(c.Env))
	if err != nil {
		return nil, fmt.Errorf("command %s: %w", c.ID, err)
	}
	secrets, err := encodeJSON(emptyIfNil(c.Secrets))
	if err != nil {
		return nil, fmt.Errorf("command %s: %w", c.ID, err)
	}
	var pty sql.NullString
	if c.PTY != nil {
		if pty.String, err = encodeJSON(c.PTY); err != nil {
			return nil, fmt.Errorf("command %s: %w", c.ID, err)
		}
		pty.Valid = true
	}
	var exit sql.NullInt64
	if c.ExitCode != nil {
		exit = sql.NullInt64{Int64: int64(*c.ExitCode), Valid: true}
	}
	return []any{
		sql.Named("id", c.ID),
		sql.Named("sandbox_id", c.SandboxID),
		sql.Named("command", c.Command),
		sql.Named("argv", argvJSON),
		sql.Named("cwd", c.Cwd),
		sql.Named("env", env),
		sql.Named("user", c.User),
		sql.Named("timeout_s", c.TimeoutS),
		sql.Named("stdin", c.Stdin),
		sql.Named("pty", pty),
		sql.Named("no_output_alert_s", c.NoOutputAlertS),
		sql.Named("state", string(c.State)),
		sql.Named("exit_code", exit),
		sql.Named("signal", c.Signal),
		sql.Named("timed_out", c.TimedOut),
		sql.Named("started_at", formatTime(c.StartedAt)),
		sql.Named("ended_at", nullTime(c.EndedAt)),
		sql.Named("stdout_bytes", c.StdoutBytes),
		sql.Named("stderr_bytes", c.StderrBytes),
		sql.Named("secrets", secrets),
		sql.Named("pid", c.PID),
		sql.Named("tag", c.Tag),
	}, nil
}

func scanCommand(r scanner) (api.Command, error) {
	var (
		c                  api.Command
		argv, env, started string
		secrets            string
		pty, ended         sql.NullString
		exit               sql.NullInt64
	)
	err := r.Scan(&c.ID, &c.SandboxID, &c.Command, &argv, &c.Cwd, &env, &c.User, &c.TimeoutS, &c.Stdin, &pty,
		&c.NoOutputAlertS, &c.State, &exit, &c.Signal, &c.TimedOut, &started, &ended,
		&c.StdoutBytes, &c.StderrBytes, &secrets, &c.PID, &c.Tag, &c.Version)
	if err != nil {
		return api.Command{}, err
	}
	var d decoder
	d.json(argv, &c.Argv)
	d.json(env, &c.Env)
	d.json(secrets, &c.Secrets)
	if pty.Valid {
		d.json(pty.String, &c.PTY)
	}
	c.StartedAt = d.time(started)
	c.EndedAt = d.timePtr(ended)
	if d.err != nil {
		return api.Command{}, fmt.Errorf("command %s: %w", c.ID, d.err)
	}
	if exit.Valid {
		code := int(exit.Int64)
		c.ExitCode = &code
	}
	if c.Argv == nil {
		c.Argv = []string{}
	}
	c.Env = emptyIfNil(c.Env)
	c.Secrets = emptyIfNil(c.Secrets)
	return c, nil
}

// CreateCommand stores a new command of an existing sandbox.
func (db *DB) CreateCommand(ctx context.Context, c api.Command) error {
	args, err := commandArgs(c)
	if err != nil {
		return err
	}
	_, err = db.write.ExecContext(ctx, insertCommand, args...)
	switch sqliteCode(err) {
	case primaryKeyViolation:
		return api.Errorf(api.CodeConflict, "command %s already exists", c.ID)
	case foreignKeyViolation:
		return api.Errorf(api.CodeNotFound, "sandbox %s not found", c.SandboxID)
	}
	if err != nil {
		return fmt.Errorf("insert command %s: %w", c.ID, err)
	}
	return nil
}

// UpdateCommand replaces every field of the command with c's ID and
// sandbox when the row is still at c.Version, and stores the next version.
func (db *DB) UpdateCommand(ctx context.Context, c api.Command) error {
	args, err := commandArgs(c)
	if err != nil {
		return err
	}
	res, err := db.write.ExecContext(ctx, updateCommand, append(args, sql.Named("version", c.Version))...)
	if err != nil {
		return fmt.Errorf("update command %s: %w", c.ID, err)
	}
	return db.versioned(ctx, res, "command "+c.ID,
		"SELECT 1 FROM commands WHERE id = ? AND sandbox_id = ?", c.ID, c.SandboxID)
}

// UpdateCommandEvent is UpdateCommand and AppendEvent of e in one
// transaction: both are stored, or neither.
func (db *DB) UpdateCommandEvent(ctx context.Context, c api.Command, teamID string, e api.Event) (api.Event, error) {
	args, err := commandArgs(c)
	if err != nil {
		return e, err
	}
	res, stored, err := db.execWithEvent(ctx, teamID, e, func(err error) error {
		return fmt.Errorf("update command %s: %w", c.ID, err)
	}, updateCommand, append(args, sql.Named("version", c.Version))...)
	if err != nil {
		return e, err
	}
	if err := db.versioned(ctx, res, "command "+c.ID,
		"SELECT 1 FROM commands WHERE id = ? AND sandbox_id = ?", c.ID, c.SandboxID); err != nil {
		return e, err
	}
	return stored, nil
}

// GetCommand returns the command of that sandbox with that ID.
func (db *DB) GetCommand(ctx context.Context, sandboxID, id string) (api.Command, error) {
	row := db.read.QueryRowContext(ctx,
		selectCommand+" WHERE id = ? AND sandbox_id = ?", id, sandboxID)
	c, err := scanCommand(row)
	if errors.Is(err, sql.ErrNoRows) {
		return api.Command{}, api.Errorf(api.CodeNotFound, "command %s not found", id)
	}
	if err != nil {
		return api.Command{}, fmt.Errorf("get command %s: %w", id, err)
	}
	return c, nil
}

// ListCommands returns the commands f selects, by ID.
func (db *DB) ListCommands(ctx context.Context, f store.CommandFilter) ([]api.Command, error) {
	var w where
	if f.SandboxID != "" {
		w.add("sandbox_id = ?", f.SandboxID)
	}
	in(&w, "state", f.States)
	q, args := w.query(selectCommand, f.After, f.Limit)
	cs, err := queryAll(ctx, db.read, scanCommand, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list commands: %w", err)
	}
	return cs, nil
}

// DeleteCommand removes a command that never started.
func (db *DB) DeleteCommand(ctx context.Context, sandboxID, id string) error {
	res, err := db.write.ExecContext(ctx, "DELETE FROM commands WHERE id = ? AND sandbox_id = ?", id, sandboxID)
	if err != nil {
		return fmt.Errorf("delete command %s: %w", id, err)
	}
	return mustAffect(res, api.Errorf(api.CodeNotFound, "command %s not found", id))
}
