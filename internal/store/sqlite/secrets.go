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

const secretColumns = "team_id, name, key_id, nonce, ciphertext, created_at, updated_at"

func scanSecret(r scanner) (store.Secret, error) {
	var s store.Secret
	var created, updated string
	if err := r.Scan(&s.TeamID, &s.Name, &s.KeyID, &s.Nonce, &s.Ciphertext, &created, &updated); err != nil {
		return store.Secret{}, err
	}
	var d decoder
	s.CreatedAt = d.time(created)
	s.UpdatedAt = d.time(updated)
	return s, d.err
}

// PutSecret stores a secret, replacing the sealed value of one of the same
// team and name.
func (db *DB) PutSecret(ctx context.Context, s store.Secret) (bool, error) {
	tx, err := db.write.BeginTx(ctx, nil)
	if err != nil {
		return false, fmt.Errorf("put secret %s: %w", s.Name, err)
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx,
		"UPDATE secrets SET key_id = ?, nonce = ?, ciphertext = ?, updated_at = ? WHERE team_id = ? AND name = ?",
		s.KeyID, s.Nonce, s.Ciphertext, formatTime(s.UpdatedAt), s.TeamID, s.Name)
	if err != nil {
		return false, fmt.Errorf("put secret %s: %w", s.Name, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("put secret %s: %w", s.Name, err)
	}
	created := n == 0
	if created {
		_, err = tx.ExecContext(ctx, "INSERT INTO secrets ("+secretColumns+") VALUES (?, ?, ?, ?, ?, ?, ?)",
			s.TeamID, s.Name, s.KeyID, s.Nonce, s.Ciphertext, formatTime(s.CreatedAt), formatTime(s.UpdatedAt))
		if sqliteCode(err) == foreignKeyViolation {
			return false, api.Errorf(api.CodeNotFound, "team %s not found", s.TeamID)
		}
		if err != nil {
			return false, fmt.Errorf("insert secret %s: %w", s.Name, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return false, fmt.Errorf("put secret %s: %w", s.Name, err)
	}
	return created, nil
}

// GetSecret returns a team's secret.
func (db *DB) GetSecret(ctx context.Context, teamID, name string) (store.Secret, error) {
	row := db.read.QueryRowContext(ctx, "SELECT "+secretColumns+" FROM secrets WHERE team_id = ? AND name = ?", teamID, name)
	s, err := scanSecret(row)
	if errors.Is(err, sql.ErrNoRows) {
		return store.Secret{}, api.Errorf(api.CodeNotFound, "secret %q not found", name)
	}
	if err != nil {
		return store.Secret{}, fmt.Errorf("get secret %s: %w", name, err)
	}
	return s, nil
}

// ListSecrets returns the secrets f selects, by team and name.
func (db *DB) ListSecrets(ctx context.Context, f store.SecretFilter) ([]store.Secret, error) {
	var w where
	if f.TeamID != "" {
		w.add("team_id = ?", f.TeamID)
	}
	if f.NotKeyID != "" {
		w.add("key_id != ?", f.NotKeyID)
	}
	if f.After != "" {
		w.add("name > ?", f.After)
	}
	q := "SELECT " + secretColumns + " FROM secrets"
	if len(w.conds) > 0 {
		q += " WHERE " + strings.Join(w.conds, " AND ")
	}
	q += " ORDER BY team_id, name"
	if f.Limit > 0 {
		q += " LIMIT ?"
		w.args = append(w.args, f.Limit)
	}
	ss, err := queryAll(ctx, db.read, scanSecret, q, w.args...)
	if err != nil {
		return nil, fmt.Errorf("list secrets: %w", err)
	}
	return ss, nil
}

// DeleteSecret removes a team's secret.
func (db *DB) DeleteSecret(ctx context.Context, teamID, name string) error {
	res, err := db.write.ExecContext(ctx, "DELETE FROM secrets WHERE team_id = ? AND name = ?", teamID, name)
	if err != nil {
		return fmt.Errorf("delete secret %s: %w", name, err)
	}
	return mustAffect(res, api.Errorf(api.CodeNotFound, "secret %q not found", name))
}

// RekeySecret replaces a secret's sealed value if it still has nonce prev.
func (db *DB) RekeySecret(ctx context.Context, s store.Secret, prev []byte) (bool, error) {
	res, err := db.write.ExecContext(ctx,
		"UPDATE secrets SET key_id = ?, nonce = ?, ciphertext = ? WHERE team_id = ? AND name = ? AND nonce = ?",
		s.KeyID, s.Nonce, s.Ciphertext, s.TeamID, s.Name, prev)
	if err != nil {
		return false, fmt.Errorf("rekey secret %s: %w", s.Name, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("rekey secret %s: %w", s.Name, err)
	}
	return n > 0, nil
}
