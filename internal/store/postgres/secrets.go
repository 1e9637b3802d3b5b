package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/store"
)

const secretColumns = "team_id, name, key_id, nonce, ciphertext, created_at, updated_at"

func scanSecret(r scanner) (store.Secret, error) {
	var s store.Secret
	err := r.Scan(&s.TeamID, &s.Name, &s.KeyID, &s.Nonce, &s.Ciphertext, &s.CreatedAt, &s.UpdatedAt)
	return s, err
}

// PutSecret stores a secret, replacing the sealed value of one of the same
// team and name (its created_at stays). One upsert, so that two replicas
// putting the same name at once both succeed; xmax is 0 only in a row
// the statement inserted.
func (db *DB) PutSecret(ctx context.Context, s store.Secret) (bool, error) {
	var created bool
	err := db.pool.QueryRow(ctx, "INSERT INTO secrets AS s ("+secretColumns+`) VALUES ($1, $2, $3, $4, $5, $6, $7)
		ON CONFLICT (team_id, name) DO UPDATE SET key_id = excluded.key_id, nonce = excluded.nonce,
			ciphertext = excluded.ciphertext, updated_at = excluded.updated_at
		RETURNING xmax = 0`,
		s.TeamID, s.Name, s.KeyID, s.Nonce, s.Ciphertext, s.CreatedAt, s.UpdatedAt).Scan(&created)
	if violation(err) == "foreign" {
		return false, api.Errorf(api.CodeNotFound, "team %s not found", s.TeamID)
	}
	if err != nil {
		return false, fmt.Errorf("put secret %s: %w", s.Name, err)
	}
	return created, nil
}

// GetSecret returns a team's secret.
func (db *DB) GetSecret(ctx context.Context, teamID, name string) (store.Secret, error) {
	row := db.pool.QueryRow(ctx, "SELECT "+secretColumns+" FROM secrets WHERE team_id = $1 AND name = $2", teamID, name)
	s, err := scanSecret(row)
	if errors.Is(err, pgx.ErrNoRows) {
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
		w.add("key_id <> ?", f.NotKeyID)
	}
	if f.After != "" {
		w.add("name > ?", f.After)
	}
	q := w.limit("SELECT "+secretColumns+" FROM secrets"+w.clause()+" ORDER BY team_id, name", f.Limit)
	ss, err := queryAll(ctx, db.pool, scanSecret, q, w.args...)
	if err != nil {
		return nil, fmt.Errorf("list secrets: %w", err)
	}
	return ss, nil
}

// DeleteSecret removes a team's secret.
func (db *DB) DeleteSecret(ctx context.Context, teamID, name string) error {
	tag, err := db.pool.Exec(ctx, "DELETE FROM secrets WHERE team_id = $1 AND name = $2", teamID, name)
	if err != nil {
		return fmt.Errorf("delete secret %s: %w", name, err)
	}
	return mustAffect(tag, api.Errorf(api.CodeNotFound, "secret %q not found", name))
}

// RekeySecret replaces a secret's sealed value if it still has nonce prev.
func (db *DB) RekeySecret(ctx context.Context, s store.Secret, prev []byte) (bool, error) {
	tag, err := db.pool.Exec(ctx,
		"UPDATE secrets SET key_id = $1, nonce = $2, ciphertext = $3 WHERE team_id = $4 AND name = $5 AND nonce = $6",
		s.KeyID, s.Nonce, s.Ciphertext, s.TeamID, s.Name, prev)
	if err != nil {
		return false, fmt.Errorf("rekey secret %s: %w", s.Name, err)
	}
	return tag.RowsAffected() > 0, nil
}
