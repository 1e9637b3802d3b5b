package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/store"
)

// user is a reserved word in PostgreSQL, hence the quotes.
const commandColumns = `id, sandbox_id, command, argv, cwd, env, "user", timeout_s, stdin, pty,
	no_output_alert_s, state, exit_code, signal, timed_out, started_at, ended_at,
	stdout_bytes, stderr_bytes, secrets, pid, tag`

const insertCommand = `INSERT INTO commands (` + commandColumns + `) VALUES (
	@id, @sandbox_id, @command, @argv, @cwd, @env, @user, @timeout_s, @stdin, @pty,
	@no_output_alert_s, @state, @exit_code, @signal, @timed_out, @started_at, @ended_at,
	@stdout_bytes, @stderr_bytes, @secrets, @pid, @tag)`

// selectCommand reads a command's columns and its version (versions.go).
const selectCommand = "SELECT " + commandColumns + ", version FROM commands"

// commandArgs are the named column values of c.
func commandArgs(c api.Command) (pgx.NamedArgs, error) {
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
	var pty *string
	if c.PTY != nil {
		s, err := encodeJSON(c.PTY)
		if err != nil {
			return nil, fmt.Errorf("command %s: %w", c.ID, err)
		}
		pty = &s
	}
	return pgx.NamedArgs{
		"id":                c.ID,
		"sandbox_id":        c.SandboxID,
		"command":           c.Command,
		"argv":              argvJSON,
		"cwd":               c.Cwd,
		"env":               env,
		"user":              c.User,
		"timeout_s":         c.TimeoutS,
		"stdin":             c.Stdin,
		"pty":               pty,
		"no_output_alert_s": c.NoOutputAlertS,
		"state":             string(c.State),
		"exit_code":         c.ExitCode,
		"signal":            c.Signal,
		"timed_out":         c.TimedOut,
		"started_at":        c.StartedAt,
		"ended_at":          c.EndedAt,
		"stdout_bytes":      c.StdoutBytes,
		"stderr_bytes":      c.StderrBytes,
		"secrets":           secrets,
		"pid":               c.PID,
		"tag":               c.Tag,
	}, nil
}

func scanCommand(r scanner) (api.Command, error) {
	var (
		c         api.Command
		argv, env string
		secrets   string
		pty       *string
		exit      *int64
	)
	err := r.Scan(&c.ID, &c.SandboxID, &c.Command, &argv, &c.Cwd, &env, &c.User, &c.TimeoutS, &c.Stdin, &pty,
		&c.NoOutputAlertS, &c.State, &exit, &c.Signal, &c.TimedOut, &c.StartedAt, &c.EndedAt,
		&c.StdoutBytes, &c.StderrBytes, &secrets, &c.PID, &c.Tag, &c.Version)
	if err != nil {
		return api.Command{}, err
	}
	var d decoder
	d.json(argv, &c.Argv)
	d.json(env, &c.Env)
	d.json(secrets, &c.Secrets)
	if pty != nil {
		d.json(*pty, &c.PTY)
	}
	if d.err != nil {
		return api.Command{}, fmt.Errorf("command %s: %w", c.ID, d.err)
	}
	if exit != nil {
		code := int(*exit)
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
	_, err = db.pool.Exec(ctx, insertCommand, args)
	switch violation(err) {
	case "primary":
		return api.Errorf(api.CodeConflict, "command %s already exists", c.ID)
	case "foreign":
		return api.Errorf(api.CodeNotFound, "sandbox %s not found", c.SandboxID)
	}
	if err != nil {
		return fmt.Errorf("insert command %s: %w", c.ID, err)
	}
	return nil
}

// GetCommand returns the command of that sandbox with that ID.
func (db *DB) GetCommand(ctx context.Context, sandboxID, id string) (api.Command, error) {
	row := db.pool.QueryRow(ctx,
		selectCommand+" WHERE id = $1 AND sandbox_id = $2", id, sandboxID)
	c, err := scanCommand(row)
	if errors.Is(err, pgx.ErrNoRows) {
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
	cs, err := queryAll(ctx, db.pool, scanCommand, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list commands: %w", err)
	}
	return cs, nil
}

// DeleteCommand removes a command that never started.
func (db *DB) DeleteCommand(ctx context.Context, sandboxID, id string) error {
	tag, err := db.pool.Exec(ctx, "DELETE FROM commands WHERE id = $1 AND sandbox_id = $2", id, sandboxID)
	if err != nil {
		return fmt.Errorf("delete command %s: %w", id, err)
	}
	return mustAffect(tag, api.Errorf(api.CodeNotFound, "command %s not found", id))
}
